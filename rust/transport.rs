// SPDX-License-Identifier: GPL-2.0

//! The `rdma` transport class.

use core::ptr::NonNull;

use kernel::{c_str, prelude::*, str::CStr};

use crate::{
    kapi::{errno, xprt},
    sys,
};

/// `XPRT_TRANSPORT_RDMA`: the ident NFS asks for with `proto=rdma`.
const XPRT_TRANSPORT_RDMA: u32 = 256;

/// The RPC-over-RDMA transport class.
pub(crate) struct RdmaTransport;

impl xprt::TransportClass for RdmaTransport {
    const NAME: &'static CStr = c_str!("rdma");
    const IDENT: u32 = XPRT_TRANSPORT_RDMA;
    const NETIDS: [&'static CStr; xprt::MAX_NETIDS] = [c_str!("rdma"), c_str!("rdma6")];

    fn setup(args: &xprt::CreateArgs<'_>) -> Result<NonNull<sys::rpc_xprt>> {
        let server = args.servername().unwrap_or(c_str!("(unnamed)"));
        if args.is_backchannel() {
            pr_warn!("backchannel transports are not supported (server {})\n", server);
        } else {
            pr_warn!(
                "cannot create a transport to {}: the RDMA data path is not implemented yet\n",
                server
            );
        }
        Err(errno::EPROTONOSUPPORT())
    }
}
