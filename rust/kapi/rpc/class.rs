// SPDX-License-Identifier: GPL-2.0

//! Client-side RPC transport classes (`struct xprt_class`).
//!
//! A [`ClassRegistration`] makes a [`TransportClass`] known to SUNRPC for its
//! netids, so that `mount -o proto=<netid>` reaches [`TransportClass::setup`].
//! Dropping the registration unregisters the class.

use core::{marker::PhantomData, mem::offset_of};

use kernel::{
    error::{to_result, Result},
    ffi::c_char,
    prelude::*,
    str::CStr,
    ThisModule,
};

use crate::{
    kapi::slot::{self, Claim, SlotRef},
    sys,
};

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
pub(crate) struct ClassStorage {
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
pub(crate) type ClassSlot = slot::ClassSlot<ClassStorage>;

/// A `&'static` [`ClassSlot`], in a form a constant may hold.
pub(crate) type ClassSlotRef = SlotRef<ClassStorage>;

/// A registered transport class; unregistered on drop.
///
/// # Invariants
///
/// The class of `claim` is `T`'s, registered with SUNRPC (by `new`) until
/// `drop` unregisters it.
pub(crate) struct ClassRegistration<T: TransportClass> {
    claim: Claim<ClassStorage>,
    _class: PhantomData<T>,
}

impl<T: TransportClass> ClassRegistration<T> {
    /// Registers `T` with SUNRPC; `module` (this module) is held by SUNRPC
    /// around each `setup` call. Fails with `EBUSY` if `T` is registered,
    /// or if its slot holds another class.
    pub(crate) fn new(module: &'static ThisModule) -> Result<Self> {
        let claim = T::SLOT.get().claim::<T>(|| Self::class(module))?;
        // SAFETY: the class is made (its netid strings are `'static`) and
        // lives as long as the module; the claim is ours, so nobody else
        // registers it.
        if let Err(e) = to_result(unsafe { sys::xprt_register_transport(claim.raw().cast()) }) {
            // SAFETY: not registered; the claim goes with this call.
            unsafe { claim.end() };
            return Err(e);
        }
        // INVARIANT: registered above.
        Ok(Self { claim, _class: PhantomData })
    }

    /// `T`'s class, with its netids.
    fn class(module: &'static ThisModule) -> ClassStorage {
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
        ClassStorage { class, netid }
    }
}

impl<T: TransportClass> Drop for ClassRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: registered by `new` (type invariant); SUNRPC takes it off
        // its list under its lock. Transports of the class, and `setup`
        // calls under way, keep pointing at module memory that stays.
        let rc = unsafe { sys::xprt_unregister_transport(self.claim.raw().cast()) };
        if rc != 0 {
            pr_warn!("xprt_unregister_transport failed: {}\n", rc);
        }
        // SAFETY: unregistered just above (SUNRPC fails only for a class
        // it does not have); the claim goes with `self`.
        unsafe { self.claim.end() };
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
            unsafe { (*xprt.as_ptr()).xprt_class = T::SLOT.get().raw().cast() };
            xprt.as_ptr()
        }
        Err(e) => e.to_ptr(),
    }
}
