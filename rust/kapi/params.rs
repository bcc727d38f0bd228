// SPDX-License-Identifier: GPL-2.0

//! The module's parameters as `params.c` declares them, read as raw values.
//! Ranges and meaning are the caller's (`crate::params`).

use crate::sys;

/// One reading of every module parameter, unclamped.
#[derive(Clone, Copy)]
pub(crate) struct RawParams {
    /// `slot_table_entries`.
    pub(crate) slot_table_entries: u32,
    /// `max_inline_read`.
    pub(crate) max_inline_read: u32,
    /// `max_inline_write`.
    pub(crate) max_inline_write: u32,
    /// `versions`, as a bit mask (bit N: version N allowed).
    pub(crate) versions: u32,
    /// `probe_interval` in seconds.
    pub(crate) probe_interval: u32,
    /// `server_credits`.
    pub(crate) server_credits: u32,
}

/// Reads the parameters as they are now (each may change at any time
/// through sysfs; every field is one atomic read of an `unsigned int`).
pub(crate) fn read() -> RawParams {
    // SAFETY: each accessor reads one `unsigned int` module parameter of
    // params.c with READ_ONCE; they take no arguments and touch nothing else.
    unsafe {
        RawParams {
            slot_table_entries: sys::rpcrdma_rs_param_slot_table_entries(),
            max_inline_read: sys::rpcrdma_rs_param_max_inline_read(),
            max_inline_write: sys::rpcrdma_rs_param_max_inline_write(),
            versions: sys::rpcrdma_rs_param_versions(),
            probe_interval: sys::rpcrdma_rs_param_probe_interval(),
            server_credits: sys::rpcrdma_rs_param_server_credits(),
        }
    }
}

/// `server`: register the server transport class (read once, at load).
pub(crate) fn server() -> bool {
    // SAFETY: reads one `bool` module parameter of params.c (read-only
    // after load) with READ_ONCE; touches nothing else.
    unsafe { sys::rpcrdma_rs_param_server() }
}
