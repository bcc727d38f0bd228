// SPDX-License-Identifier: GPL-2.0

//! Borrowed views of networking objects: a network namespace and a socket
//! address.

use kernel::types::Opaque;

use crate::sys;

/// A network namespace (`struct net`), borrowed from whoever holds a
/// reference on it (a transport holds one on its own).
///
/// # Invariants
///
/// A `&Net` is only made by [`Net::from_raw`] from a namespace that stays
/// live for the borrow.
#[repr(transparent)]
pub(crate) struct Net(Opaque<sys::net>);

impl Net {
    /// # Safety
    ///
    /// `ptr` must be a live network namespace for `'a`.
    pub(super) unsafe fn from_raw<'a>(ptr: *mut sys::net) -> &'a Net {
        // SAFETY: `Net` is a transparent wrapper of `Opaque<net>`, which
        // has the layout of a `net`; live for `'a` per the contract.
        unsafe { &*ptr.cast::<Net>() }
    }

    /// The namespace, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::net {
        self.0.get()
    }
}

/// A socket address in a `sockaddr_storage`, borrowed (a transport's peer
/// address).
///
/// # Invariants
///
/// A `&SockAddr` is only made by [`SockAddr::from_raw`] from storage that
/// holds a socket address and stays valid for the borrow.
#[repr(transparent)]
pub(crate) struct SockAddr(Opaque<sys::__kernel_sockaddr_storage>);

impl SockAddr {
    /// # Safety
    ///
    /// `ptr` must be a `sockaddr_storage` holding a socket address, valid
    /// for `'a`.
    pub(super) unsafe fn from_raw<'a>(ptr: *const sys::__kernel_sockaddr_storage) -> &'a SockAddr {
        // SAFETY: transparent wrapper; valid for `'a` per the contract.
        unsafe { &*ptr.cast::<SockAddr>() }
    }

    /// The address, for C functions that take a `struct sockaddr *`.
    pub(super) fn as_ptr(&self) -> *const sys::sockaddr {
        self.0.get().cast_const().cast()
    }
}
