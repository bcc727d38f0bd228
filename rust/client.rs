// SPDX-License-Identifier: GPL-2.0

//! The RPC-over-RDMA client: the `rdma` transport class and its transports,
//! one file per part of the protocol.
//!
//! Ownership, per object:
//! - [`xprt::RdmaXprt`] belongs to SUNRPC's `rpc_xprt` (made in `setup`,
//!   dropped in `destroy`). It owns the current [`conn::Endpoint`], if
//!   connected.
//! - [`conn::Endpoint`] is one connection. Its `Connection` owns the cm_id,
//!   the verbs objects and every Send and Receive buffer; dropping the
//!   endpoint drains the queue pair before anything is freed.
//! - A call is copied into a pre-mapped Send buffer of the endpoint (or its
//!   page list mapped for the Send's life), so the HCA never reads memory
//!   SUNRPC owns beyond that; a reply is copied out of the Receive buffer
//!   into the request before the buffer is reposted.
//!
//! Where to look:
//!
//! | file | what |
//! |---|---|
//! | `class.rs` | the transport class, SUNRPC timeouts |
//! | `xprt.rs` | the transport and the SUNRPC transport operations |
//! | `connect.rs`, `liveness.rs` | connection set-up and teardown; the liveness probe |
//! | `conn.rs` | per-connection state and its completion/CM handlers |
//! | `marshal.rs` | sending a call (RFC 8166 section 3.5, 4) |
//! | `chunks.rs` | Read, Write and Reply chunks (RFC 8166 section 3.4, 4.2) |
//! | `regions.rs` | memory regions made on demand (for the chunks), the one a request keeps |
//! | `recvbufs.rs` | Receive buffers kept across reconnects |
//! | `reply.rs` | receiving a reply and completing its call |
//! | `credits.rs` | credits (RFC 8166 section 3.3.1) |
//! | `inline.rs` | inline thresholds (RFC 8166 section 3.3.2, RFC 8797) |
//! | `backchannel.rs` | backward calls (RFC 8167) |
//! | `version.rs` | Version Two negotiation (draft-rpcrdma-version-two section 5) |
//! | `xchar.rs` | transport characteristics (draft-rpcrdma-xcharext) |
//! | `slots.rs` | per-request transport state |
//! | `stats.rs` | counters: mountstats, debugfs |
//! | `params.rs` | module parameters |
//! | `device.rs` | the ib_core client |

#![deny(unsafe_code)]

mod backchannel;
mod chunks;
pub(crate) mod class;
mod conn;
mod connect;
mod credits;
pub(crate) mod device;
mod inline;
mod liveness;
mod marshal;
mod params;
mod regions;
mod recvbufs;
mod reply;
mod slots;
pub(crate) mod stats;
mod version;
mod xchar;
mod xprt;

// `make misuse`: unsafe code in this module does not compile.
// misuse: client_unsafe unsafe_code
#[cfg(misuse = "client_unsafe")]
fn misuse_unsafe() -> u8 {
    let x = 0u8;
    // SAFETY: none: refused by the lint.
    unsafe { core::ptr::read(&x) }
}
