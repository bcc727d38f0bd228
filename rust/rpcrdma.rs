// SPDX-License-Identifier: GPL-2.0

//! rpcrdma_rs: an RPC-over-RDMA client transport for SUNRPC, in Rust.
//!
//! The module registers an RPC transport class for the `rdma` and `rdma6`
//! netids (so `mount -o proto=rdma` reaches it) and an ib_core client that
//! tracks RDMA devices. The wire formats live in [`proto`], a `no_std` crate
//! shared with user-space tests; the C APIs are reached only through
//! [`kapi`].

// pin_init! over the connection state (one field per queue, lock and
// counter) nests deeper than the default limit of 128.
#![recursion_limit = "256"]

use kernel::prelude::*;

pub mod proto;

mod client;
mod kapi;
mod server;
mod sys;
mod verbs;

/// The module's version: in `modinfo rpcrdma_rs`, `/sys/module/rpcrdma_rs/version` and each
/// connection's line in the kernel log. dkms.conf and debian/changelog carry the same
/// (debian/rules refuses to build a package where they differ).
pub const VERSION: &str = "0.2";

const MODINFO_VERSION_LEN: usize = b"version=".len() + VERSION.len() + 1;

/// `version=VERSION\0`, the `.modinfo` entry C's `MODULE_VERSION()` makes (`module!` has no
/// key for it).
#[cfg(MODULE)]
#[used]
#[link_section = ".modinfo"]
static MODINFO_VERSION: [u8; MODINFO_VERSION_LEN] = {
    let mut out = [0u8; MODINFO_VERSION_LEN];
    let (key, value) = (b"version=", VERSION.as_bytes());
    let mut i = 0;
    while i < key.len() {
        out[i] = key[i];
        i += 1;
    }
    while i < key.len() + value.len() {
        out[i] = value[i - key.len()];
        i += 1;
    }
    out
};

// Compile-time misuse cases (`make misuse`), never in the module.
#[cfg(rpcrdma_misuse)]
mod misuse;

// The same declaration for every kernel line; only the key naming the
// authors changed (a probe in probes.mk tells which one the tree takes).
// request_module("rpc<netid>") asks for the aliases when no class serves
// the netid; on kernels without the in-tree rpcrdma they reach this module.
#[cfg(rpcrdma_module_authors)]
module! {
    type: RpcRdma,
    name: "rpcrdma_rs",
    authors: ["rpcrdma-rs developers"],
    description: "RPC-over-RDMA client transport (Rust)",
    license: "GPL",
    alias: ["rpcrdma", "rpcrdma6"],
}
#[cfg(not(rpcrdma_module_authors))]
module! {
    type: RpcRdma,
    name: "rpcrdma_rs",
    author: "rpcrdma-rs developers",
    description: "RPC-over-RDMA client transport (Rust)",
    license: "GPL",
    alias: ["rpcrdma", "rpcrdma6"],
}

struct RpcRdma {
    // Dropped in declaration order: the classes go before the device client.
    _server: Option<(
        kapi::svc::SvcClassRegistration<server::xprt::ServerXprt>,
        kapi::rpc::ClassRegistration<server::backchannel::BcClass>,
    )>,
    _class: kapi::rpc::ClassRegistration<client::class::RdmaTransport>,
    _devices: kapi::ib::ClientRegistration<client::device::Devices>,
    _debugfs: kapi::debugfs::Counters,
}

impl kernel::Module for RpcRdma {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let devices = kapi::ib::ClientRegistration::new().inspect_err(|e| {
            pr_err!("cannot register the RDMA device client: error {}\n", e.to_errno());
        })?;
        let class = kapi::rpc::ClassRegistration::new(module).inspect_err(|e| {
            pr_err!(
                "cannot register the 'rdma' RPC transport class: error {} (is the in-tree rpcrdma module loaded?)\n",
                e.to_errno()
            );
        })?;
        pr_info!("RPC-over-RDMA transport {} registered for netids rdma, rdma6\n", VERSION);
        let server = if kapi::params::server() {
            let r = kapi::svc::SvcClassRegistration::new(module).inspect_err(|e| {
                pr_err!(
                    "cannot register the 'rdma' server transport class: error {} (is the in-tree rpcrdma module loaded?)\n",
                    e.to_errno()
                );
            })?;
            let bc = kapi::rpc::ClassRegistration::new(module).inspect_err(|e| {
                pr_err!(
                    "cannot register the 'rdma backchannel' RPC transport class: error {} (is the in-tree rpcrdma module loaded?)\n",
                    e.to_errno()
                );
            })?;
            pr_info!("RPC-over-RDMA server transport {} registered (experimental)\n", VERSION);
            Some((r, bc))
        } else {
            None
        };
        let c = &client::stats::COUNTERS;
        let s = &server::stats::COUNTERS;
        let mut files = KVec::new();
        files.extend_from_slice(&c.debugfs_files(), GFP_KERNEL)?;
        files.extend_from_slice(&s.debugfs_files(), GFP_KERNEL)?;
        let debugfs = kapi::debugfs::Counters::new(&files, &c.debugfs_knobs());
        Ok(RpcRdma { _server: server, _class: class, _devices: devices, _debugfs: debugfs })
    }
}

impl Drop for RpcRdma {
    fn drop(&mut self) {
        pr_info!("RPC-over-RDMA transport unregistering\n");
    }
}

/// The `verbs_selftest` module parameter's action (params.c): runs the
/// verbs layer's loopback self-test on a local RDMA device's IPv4 address
/// (network byte order); 0 if it passed, else a negative errno.
#[no_mangle]
pub extern "C" fn rpcrdma_rs_verbs_selftest(addr: u32) -> kernel::ffi::c_int {
    match verbs::selftest::run(kapi::net::Net::initial(), addr) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
