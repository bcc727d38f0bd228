// SPDX-License-Identifier: GPL-2.0

//! SUNRPC's objects as the transport sees them, one file each: the transport
//! class ([`class`]), the `rpc_xprt` ([`xprt`]) and its operations
//! ([`ops`]), its send lock ([`sendlock`]), tasks and requests ([`rqst`]),
//! their buffers ([`xdr`]), the request memory the transport lends
//! ([`storage`]) and backchannel requests ([`bc`]).
//!
//! RPC transports (`struct rpc_xprt`) and the operations SUNRPC calls on them.
//!
//! [`new_xprt`] allocates an `rpc_xprt` with SUNRPC's own allocator and
//! attaches a Rust transport object `T: Transport` to it; the operations table
//! is built from the trait. SUNRPC owns the `rpc_xprt`; the transport object
//! lives exactly as long (it is dropped in the `destroy` operation, right
//! before SUNRPC's memory is freed). Callbacks get `&T` and borrowed handles
//! ([`Xprt`], [`Task`], [`Rqst`]) that are only valid for the call.

mod addr;
mod bc;
pub(crate) mod class;
mod ops;
mod rqst;
mod sendlock;
mod storage;
mod xdr;
mod xprt;

pub(crate) use addr::*;
pub(crate) use bc::*;
pub(crate) use class::*;
pub(crate) use ops::*;
pub(crate) use rqst::*;
pub(crate) use sendlock::*;
pub(crate) use storage::*;
pub(crate) use xdr::*;
pub(crate) use xprt::*;
