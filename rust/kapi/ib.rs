// SPDX-License-Identifier: GPL-2.0

//! ib_core and rdma_cm objects, one Rust type per C object.
//!
//! - [`device`]: an RDMA device ([`Device`], [`DeviceCaps`]) and the
//!   ib_core client that hears about devices ([`ClientRegistration`]).
//! - [`cm`]: an rdma_cm identifier ([`CmId`](cm::CmId)) and its events.
//! - [`pd`], [`cq`], [`qp`]: protection domain, completion queue, RC queue
//!   pair, each released by its `Drop`.
//! - [`buf`]: a DMA-mapped Send or Receive buffer with its work request,
//!   and the writer that builds a Send.
//! - [`mr`]: a fast-registration memory region and the writer that fills
//!   its scatterlist.
//! - [`token`]: identities of connections and lenders, the tokens that
//!   say who may reach what, and the proof that ends them.
//! - [`conn`]: the objects of one connection wired together ([`Conn`]) and
//!   the order in which they are torn down; its Send queue (`sq`), Receive
//!   queue (`rq`), memory regions (`frwr`) and the end of a token
//!   (`inv`: invalidation, release) are files of their own.
//! - [`listen`]: the passive side ([`Listener`], [`Acceptor`]).
//! - [`rw`]: RDMA Read and Write of local pages (the kernel's R/W API).
//! - `rw_op`: one R/W operation, the table that keeps them, Read sinks.
//! - `sg`: scatterlist entries of the tables above, set in place.

pub(crate) mod buf;
pub(crate) mod cm;
pub(crate) mod conn;
pub(crate) mod cq;
pub(crate) mod device;
mod events;
mod frwr;
mod inv;
pub(crate) mod listen;
pub(crate) mod mr;
pub(crate) mod pd;
pub(crate) mod qp;
mod rq;
pub(crate) mod rw;
mod rw_op;
mod sg;
mod sq;
pub(crate) mod token;

pub(crate) use buf::{Copying, Fill, Mapping, SendWriter, MAX_SEND_SGES};
pub(crate) use cm::{CmEvent, ConnParam};
pub(crate) use conn::{Conn, ConnBox, QpSizes};
pub(crate) use events::Events;
pub(crate) use cq::Completion;
pub(crate) use device::{Client, ClientRegistration, Device, DeviceCaps, DeviceName};
pub(crate) use frwr::{FillOne, Sent};
pub(crate) use inv::Reuse;
pub(crate) use listen::{Acceptor, ConnRequest, Listener};
pub(crate) use mr::{FillSg, Registered, SgWriter};
pub(crate) use rq::{HeldRecv, Received, RemoteInv};
pub(crate) use rw::{RwChunk, RwPosted, RwSeg};
pub(crate) use sq::SendPolicy;
pub(crate) use token::{Closed, ConnHandle, InFlight, Lender, Registration, Released, SendFailed};
