// SPDX-License-Identifier: GPL-2.0

//! The protocol core: RPC-over-RDMA wire formats.
//!
//! These are the files of the `rpcrdma-proto` crate in `rust/proto/`, compiled
//! into the module unchanged. They are plain `core` Rust with no `unsafe`,
//! unit-tested and fuzzed in user space (`make unit`, `make fuzz`).

#![forbid(unsafe_code)]

#[path = "proto/src/xdr.rs"]
pub mod xdr;

#[path = "proto/src/cm.rs"]
pub mod cm;

#[path = "proto/src/v1.rs"]
pub mod v1;

#[path = "proto/src/v2.rs"]
pub mod v2;

#[path = "proto/src/xchar.rs"]
pub mod xchar;

#[path = "proto/src/plan.rs"]
pub mod plan;

#[path = "proto/src/responder.rs"]
pub mod responder;

#[path = "proto/src/credits.rs"]
pub mod credits;

#[path = "proto/src/stats.rs"]
pub mod stats;
