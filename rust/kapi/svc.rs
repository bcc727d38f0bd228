// SPDX-License-Identifier: GPL-2.0

//! knfsd's side of SUNRPC as a server transport sees it, one file each:
//! the transport class (`struct svc_xprt_class`, [`class`]) and the
//! operations the core calls on its transports, the transport itself
//! (`struct svc_xprt`, [`xprt`]), and the request a thread brings to
//! `recvfrom` and `sendto` (`struct svc_rqst`, [`rqst`]).
//!
//! The core owns each transport through a reference count it keeps in
//! the `svc_xprt`; the Rust object that embeds it ([`SvcXprt`]) lives in an
//! `Arc` of which the core holds one reference from the moment the
//! transport is handed over until `xpo_free`. The operations get `&T`
//! and borrowed views, valid for the call.

mod class;
mod rqst;
mod xprt;

pub(crate) use class::*;
pub(crate) use rqst::*;
pub(crate) use xprt::*;
