//! Wire formats of RPC-over-RDMA, with no kernel dependency.
//!
//! This crate is the protocol core of `rpcrdma_rs`. The same source files are
//! compiled into the kernel module (see `rust/proto.rs`, which includes them
//! with `#[path]`) and tested here in user space with `cargo test`. Keep every
//! file `core`-only, free of `unsafe`, and refer to sibling modules with
//! `super::` so that the files work under both roots.
//!
//! Decoders take untrusted bytes from the network: every count and length is
//! checked against the buffer before use, errors are typed, nothing panics.
#![no_std]
#![forbid(unsafe_code)]

pub mod xdr;
pub mod cm;
pub mod v1;
pub mod v2;
pub mod xchar;
pub mod plan;
pub mod responder;
pub mod credits;
pub mod stats;

#[cfg(test)]
mod testutil;
