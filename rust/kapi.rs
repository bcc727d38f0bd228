// SPDX-License-Identifier: GPL-2.0

//! Safe abstractions over the C APIs the transport uses.
//!
//! All `unsafe` code of the module lives below this module: each abstraction
//! turns a C registration or object into a Rust type whose lifetime and
//! ownership the compiler checks, and each C callback into a trait method.

pub(crate) mod cell;
pub(crate) mod compat;
pub(crate) mod debugfs;
pub(crate) mod errno;
pub(crate) mod ib;
pub(crate) mod net;
pub(crate) mod page;
pub(crate) mod params;
pub(crate) mod ratelimit;
pub(crate) mod rpc;
pub(crate) mod slot;
pub(crate) mod svc;
pub(crate) mod time;
pub(crate) mod trace;
pub(crate) mod work;


/// Bytes in a page: the kernel's `PAGE_SIZE`, the one page size the module
/// uses (chunk planning, scatterlists, MR depth and the backchannel payload
/// all must agree on it; arm64 kernels may use 16 or 64 KiB pages).
pub(crate) const PAGE_SIZE: u32 = {
    assert!(kernel::page::PAGE_SIZE <= u32::MAX as usize);
    kernel::page::PAGE_SIZE as u32
};

/// A fixed-size text buffer that `write!` fills (for C strings built from
/// numbers); output that does not fit makes the write fail.
pub(crate) struct FmtBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> FmtBuf<N> {
    /// Empty.
    pub(crate) const fn new() -> Self {
        FmtBuf { buf: [0; N], len: 0 }
    }

    /// What was written.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl<const N: usize> core::fmt::Write for FmtBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(core::fmt::Error)?;
        self.buf.get_mut(self.len..end).ok_or(core::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Copies `src` into the fixed-size C string buffer `dst`, NUL-terminated,
/// truncating if needed.
fn copy_c_name(dst: &mut [kernel::ffi::c_char], src: &kernel::str::CStr) {
    let bytes = compat::cstr_bytes(src);
    let n = bytes.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(bytes.iter().take(n)) {
        *d = *s as kernel::ffi::c_char;
    }
    if let Some(nul) = dst.get_mut(n) {
        *nul = 0;
    }
}
