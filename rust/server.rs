// SPDX-License-Identifier: GPL-2.0

//! The server side of RPC-over-RDMA (svcrdma's role): the `rdma` server
//! transport class knfsd serves over, on the same [`verbs`](crate::verbs)
//! layer as the client. Documentation/server.rst is its design and says
//! how far it is built: listeners, connections accepted from a server
//! thread with RFC 8797 private data, calls inline or with Read chunks
//! (pulled by RDMA Read), replies inline, in Write chunks or in the Reply
//! chunk (pushed by RDMA Write), callbacks over the backchannel.
//!
//! - [`xprt`]: the transport object (a listener or a connection) and the
//!   class the core calls.
//! - [`listen`]: listeners and the queue of connection requests.
//! - [`accept`]: accepting a connection: private data, queues, credits.
//! - [`recv`]: Receives held until a thread takes their call.
//! - [`read_chunk`]: calls with Read chunks and Long Calls, pulled by RDMA Read.
//! - [`reply`]: replies, RDMA Writes of Write and Reply chunks, and
//!   RDMA_ERROR for what cannot be carried.
//! - [`backchannel`]: the `rdma backchannel` class: NFSv4.1 callbacks
//!   over the forward connection, their replies found among the calls.
//! - [`version`]: the protocol version of a connection (One or Two), its
//!   headers and RDMA_ERRORs.
//! - [`xchar`]: transport characteristics (xcharext) on Version Two.
//! - [`stats`]: the server's counters.
//! - [`ring`]: the fixed-room queues those use.
//! - [`few`]: short lists kept in place, not allocated per call.

#![deny(unsafe_code)]

mod accept;
pub(crate) mod backchannel;
mod few;
mod listen;
mod read_chunk;
mod recv;
mod reply;
mod ring;
pub(crate) mod stats;
mod version;
mod xchar;
pub(crate) mod xprt;

// `make misuse`: unsafe code in the server does not compile.
// misuse: server_unsafe unsafe_code
#[cfg(misuse = "server_unsafe")]
fn misuse_unsafe() -> u8 {
    let x = 0u8;
    // SAFETY: none: refused by the lint.
    unsafe { core::ptr::read(&x) }
}
