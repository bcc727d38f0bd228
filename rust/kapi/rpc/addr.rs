// SPDX-License-Identifier: GPL-2.0

//! A transport's peer address: as C functions take it, copied out for
//! whoever needs its bytes or its text, and the display strings SUNRPC and
//! NFS show (`addr=`, `port=`, the netid), which the transport keeps.

use kernel::{prelude::*, str::CStr};

use super::{xdr::read_once, Xprt};
use crate::kapi::{compat, errno, net::SockAddr, FmtBuf};
use crate::sys;

impl<'a> Xprt<'a> {
    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> &'a SockAddr {
        // SAFETY: `addr` is the transport's `sockaddr_storage`, valid for
        // `'a` (type invariant); SUNRPC changes only its port, with the
        // transport quiescent (`set_port`).
        unsafe { SockAddr::from_raw(&raw const (*self.raw.as_ptr()).addr) }
    }

    /// The peer's address, for C functions.
    fn peer(&self) -> *const sys::sockaddr {
        // SAFETY: only the field's address is taken.
        unsafe { core::ptr::addr_of!((*self.raw.as_ptr()).addr) }.cast()
    }

    /// The peer's socket address as bytes (family, port, address), copied.
    pub(crate) fn peer_bytes(&self) -> AddrBytes {
        let mut b = AddrBytes { buf: [0; ADDR_BYTES], len: 0 };
        let x = self.raw.as_ptr();
        // SAFETY (of the read): valid transport.
        let len = read_once!((*x).addrlen).min(ADDR_BYTES);
        // SAFETY: only the field's address is taken.
        let src = unsafe { core::ptr::addr_of!((*x).addr) }.cast::<u8>();
        for (i, d) in b.buf.iter_mut().enumerate().take(len) {
            // SAFETY: `addr` is the transport's `sockaddr_storage`, at
            // least `len` bytes; each byte is read once, as C reads a field
            // others may change (`set_port` writes the port).
            *d = unsafe { core::ptr::read_volatile(src.add(i)) };
        }
        b.len = len;
        b
    }

    /// The peer's address as text (`RPC_DISPLAY_ADDR`), copied: writing
    /// the transport's sysfs `dstaddr` replaces the string at any time.
    pub(crate) fn addr_str(&self) -> AddrText {
        let mut t = AddrText { buf: [0; ADDR_TEXT_LEN] };
        // SAFETY: valid transport; the helper writes at most `buf.len()`
        // bytes, NUL included.
        unsafe { sys::rpcrdma_rs_xprt_addr_copy(self.raw.as_ptr(), t.buf.as_mut_ptr().cast(), t.buf.len()) };
        t
    }

    /// The peer's port, host order.
    pub(crate) fn port(&self) -> u16 {
        let sa = self.peer();
        // SAFETY (of the reads): `addr` is a sockaddr_storage; the family
        // says which layout; each field is read once.
        match u32::from(read_once!((*sa).sa_family)) {
            sys::AF_INET => u16::from_be(read_once!((*sa.cast::<sys::sockaddr_in>()).sin_port)),
            sys::AF_INET6 => u16::from_be(read_once!((*sa.cast::<sys::sockaddr_in6>()).sin6_port)),
            _ => 0,
        }
    }

    /// Sets the peer's port (after rpcbind) and its display strings.
    pub(super) fn set_port(&self, port: u16) {
        let x = self.raw.as_ptr();
        // SAFETY: SUNRPC calls set_port with the transport quiescent; the
        // family selects the layout of `addr`.
        unsafe {
            match u32::from((*self.peer()).sa_family) {
                sys::AF_INET => (*(&raw mut (*x).addr).cast::<sys::sockaddr_in>()).sin_port = port.to_be(),
                sys::AF_INET6 => (*(&raw mut (*x).addr).cast::<sys::sockaddr_in6>()).sin6_port = port.to_be(),
                _ => {}
            }
        }
        let mut dec = FmtBuf::<8>::new();
        let mut hex = FmtBuf::<8>::new();
        use core::fmt::Write;
        let _ = write!(dec, "{}\0", port);
        let _ = write!(hex, "{:4x}\0", port);
        self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_PORT, dec.as_bytes());
        self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_HEX_PORT, hex.as_bytes());
    }

    /// Replaces one display string with a kstrdup'ed copy of `nul_terminated`.
    fn replace_address(&self, which: u32, nul_terminated: &[u8]) -> bool {
        if nul_terminated.last() != Some(&0) {
            return false;
        }
        let x = self.raw.as_ptr();
        // SAFETY: the string is NUL-terminated (checked); the old one was
        // kstrdup'ed by us (or is NULL) and is freed exactly once here.
        unsafe {
            let new = sys::kstrdup(nul_terminated.as_ptr().cast(), kernel::bindings::GFP_KERNEL);
            let Some(slot) = (*x).address_strings.get_mut(which as usize) else {
                sys::kfree(new.cast());
                return false;
            };
            sys::kfree((*slot).cast());
            *slot = new;
            !new.is_null()
        }
    }

    /// Fills the address strings SUNRPC and NFS display (addr=, port,
    /// netid, ...).
    pub(super) fn format_addresses(&self, netid: &'static CStr) -> Result {
        use core::fmt::Write;
        let mut addr = [0u8; 64];
        // SAFETY: `peer` is a valid socket address; rpc_ntop writes at most
        // `len` bytes and NUL-terminates.
        let n = unsafe { sys::rpc_ntop(self.peer(), addr.as_mut_ptr().cast(), addr.len()) };
        if n == 0 || n >= addr.len() {
            return Err(EINVAL);
        }
        let mut ok = self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_ADDR, &addr[..=n]);
        let mut hex = FmtBuf::<40>::new();
        // SAFETY: family selects the layout.
        unsafe {
            let sa = self.peer();
            match u32::from((*sa).sa_family) {
                sys::AF_INET => {
                    let a = u32::from_be((*sa.cast::<sys::sockaddr_in>()).sin_addr.s_addr);
                    let _ = write!(hex, "{:08x}\0", a);
                }
                sys::AF_INET6 => {
                    for b in (*sa.cast::<sys::sockaddr_in6>()).sin6_addr.in6_u.u6_addr8 {
                        let _ = write!(hex, "{:02x}", b);
                    }
                    let _ = hex.write_str("\0");
                }
                _ => return Err(errno::EAFNOSUPPORT()),
            }
        }
        ok &= self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_HEX_ADDR, hex.as_bytes());
        // PROTO and NETID point at static strings, like the in-tree client's.
        let x = self.raw.as_ptr();
        // SAFETY: the slots exist (RPC_DISPLAY_MAX entries); static strings
        // are never freed (see `free_addresses`).
        unsafe {
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_PROTO as usize] =
                compat::cstr_ptr(kernel::c_str!("rdma"));
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_NETID as usize] = compat::cstr_ptr(netid);
        }
        self.set_port(self.port());
        if ok {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }

    /// Frees the kstrdup'ed display strings.
    pub(super) fn free_addresses(&self) {
        let x = self.raw.as_ptr();
        for (i, slot) in (0..).zip(
            // SAFETY: the transport is being torn down; nobody reads these now.
            unsafe { (*x).address_strings.iter_mut() },
        ) {
            if i == sys::rpc_display_format_t_RPC_DISPLAY_PROTO || i == sys::rpc_display_format_t_RPC_DISPLAY_NETID {
                continue;
            }
            // SAFETY: every other string was kstrdup'ed by us or is NULL.
            unsafe { sys::kfree((*slot).cast()) };
            *slot = core::ptr::null_mut();
        }
    }
}

/// Bytes of a socket address copy ([`Xprt::peer_bytes`]).
const ADDR_BYTES: usize = 128;

/// A transport's peer socket address, copied ([`Xprt::peer_bytes`]).
pub(crate) struct AddrBytes {
    buf: [u8; ADDR_BYTES],
    len: usize,
}

impl AddrBytes {
    /// The bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// Room for an IPv6 address with a scope and the NUL.
const ADDR_TEXT_LEN: usize = 64;

/// A transport's peer address as text, copied out of the transport (see
/// [`Xprt::addr_str`]); prints as the address.
pub(crate) struct AddrText {
    buf: [u8; ADDR_TEXT_LEN],
}

compat::printable!(AddrText);

impl AddrText {
    /// The text `fill` writes into a buffer (NUL-terminated within it; the
    /// last byte is made a NUL whatever it wrote).
    pub(in crate::kapi) fn filled(fill: impl FnOnce(&mut [u8])) -> Self {
        let mut t = AddrText { buf: [0; ADDR_TEXT_LEN] };
        fill(&mut t.buf);
        t.buf[ADDR_TEXT_LEN - 1] = 0;
        t
    }

    /// The text as a C string (NUL-terminated: the copy leaves room for
    /// the NUL), for C.
    pub(crate) fn as_c_ptr(&self) -> *const kernel::ffi::c_char {
        self.buf.as_ptr().cast()
    }
}

impl core::fmt::Display for AddrText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = self.buf.iter().position(|&b| b == 0).unwrap_or(self.buf.len());
        f.write_str(core::str::from_utf8(&self.buf[..len]).unwrap_or("?"))
    }
}
