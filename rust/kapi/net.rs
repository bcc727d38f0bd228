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
    pub(in crate::kapi) unsafe fn from_raw<'a>(ptr: *mut sys::net) -> &'a Net {
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
    pub(in crate::kapi) unsafe fn from_raw<'a>(ptr: *const sys::__kernel_sockaddr_storage) -> &'a SockAddr {
        // SAFETY: transparent wrapper; valid for `'a` per the contract.
        unsafe { &*ptr.cast::<SockAddr>() }
    }

    /// The address, for C functions that take a `struct sockaddr *`.
    pub(in crate::kapi) fn as_ptr(&self) -> *const sys::sockaddr {
        self.0.get().cast_const().cast()
    }

    /// True if it is an IPv4 or IPv6 address.
    pub(crate) fn is_inet(&self) -> bool {
        // SAFETY: the storage holds a socket address (type invariant),
        // whose family is its first field; one field read.
        let family = u32::from(unsafe { (*self.as_ptr()).sa_family });
        family == sys::AF_INET || family == sys::AF_INET6
    }
}

impl Net {
    /// The initial network namespace, which lives as long as the kernel.
    pub(crate) fn initial() -> &'static Net {
        // SAFETY: `init_net` is static and never freed.
        unsafe { Net::from_raw(sys::rpcrdma_rs_init_net()) }
    }
}

/// A socket address the module owns (a listening or self-test address).
pub(crate) struct SockAddrBuf(Opaque<sys::__kernel_sockaddr_storage>);

impl SockAddrBuf {
    /// The IPv4 address `addr` (network byte order, as `in4_pton` gives
    /// it) and `port`.
    pub(crate) fn ipv4(addr: u32, port: u16) -> Self {
        let sin = sys::sockaddr_in {
            sin_family: sys::AF_INET as u16,
            sin_port: port.to_be(),
            sin_addr: sys::in_addr { s_addr: addr },
            ..Default::default()
        };
        // SAFETY: all zeroes is a valid (empty) `sockaddr_storage`.
        let storage: sys::__kernel_sockaddr_storage = unsafe { core::mem::zeroed() };
        let buf = SockAddrBuf(Opaque::new(storage));
        // SAFETY: a `sockaddr_in` fits in a `sockaddr_storage`, which is
        // aligned for any socket address; the storage is ours.
        unsafe { buf.0.get().cast::<sys::sockaddr_in>().write(sin) };
        buf
    }

    /// The address.
    pub(crate) fn addr(&self) -> &SockAddr {
        // SAFETY: the storage holds a socket address (written in `ipv4`)
        // and lives as long as the borrow.
        unsafe { SockAddr::from_raw(self.0.get()) }
    }
}
