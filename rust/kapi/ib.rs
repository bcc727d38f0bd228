// SPDX-License-Identifier: GPL-2.0

//! ib_core and rdma_cm objects, one Rust type per C object.
//!
//! - [`device`]: an RDMA device ([`Device`], [`DeviceCaps`]) and the
//!   ib_core client that hears about devices ([`ClientRegistration`]).
//! - [`cm`]: an rdma_cm identifier ([`CmId`]) and its events.
//! - [`pd`], [`cq`], [`qp`]: protection domain, completion queue, RC queue
//!   pair, each released by its `Drop`.
//! - [`mr`]: a fast-registration memory region ([`mr::FrMr`]) and the
//!   tokens that say who may reach it.
//! - [`dma`]: a DMA-mapped Send or Receive buffer with its work request
//!   ([`dma::DmaBuf`]), and the pages a Send maps in place.
//! - [`listen`]: the passive side ([`Listener`], [`Acceptor`]).
//! - [`rw`]: RDMA Read and Write of local pages (the kernel's R/W API).
//! - `sg`: scatterlist entries of the tables above, set in place.
//! - [`conn`]: the objects of one connection wired together ([`Conn`]):
//!   the completion trampolines, the ring of posted Sends, and the order
//!   in which the objects must be torn down. It has no policy: which
//!   buffer to use, when to signal, when to repost are the caller's
//!   ([`Events`], [`SendPolicy`]).

pub(crate) mod cm;
pub(crate) mod conn;
pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod dma;
pub(crate) mod listen;
pub(crate) mod mr;
pub(crate) mod pd;
pub(crate) mod qp;
pub(crate) mod rw;
mod sg;

pub(crate) use cm::{CmEvent, ConnParam};
pub(crate) use conn::{Conn, ConnBox, Events, HeldRecv, QpSizes, Received, SendPolicy, Sent};
pub(crate) use cq::Completion;
pub(crate) use device::{Client, ClientRegistration, Device, DeviceCaps};
pub(crate) use dma::{PagesInFlight, SendDone, SendWriter, MAX_SEND_SGES};
pub(crate) use listen::{Acceptor, Incoming, Listener};
pub(crate) use mr::{
    Holding, Invalidated, OnePostedRegistration, OneRegistration, PostedRegistration, Registered, Registration,
    SgWriter, MAX_MRS,
};
pub(crate) use rw::RwDir;
