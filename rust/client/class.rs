// SPDX-License-Identifier: GPL-2.0

//! The `rdma` transport class (netids `rdma` and `rdma6`): what
//! `mount -o proto=rdma` reaches, and the SUNRPC timeouts its transports
//! run with.

use kernel::{alloc::flags::GFP_KERNEL, c_str, prelude::*, str::CStr, sync::Arc};

use crate::kapi::{
    errno,
    rpc::{self, ClassSlot, ClassSlotRef, CreateArgs, RpcTimeout, TransportClass, XprtParams, MAX_NETIDS},
    time, PAGE_SIZE,
};

use super::{params, xprt::RdmaXprt};

/// `XPRT_TRANSPORT_RDMA`: the ident NFS asks for with `proto=rdma`.
pub(super) const XPRT_TRANSPORT_RDMA: u32 = 256;

/// Largest RPC payload (the in-tree client's: 1 MiB plus a page).
pub(super) const MAX_PAYLOAD: u32 = (1 << 20) + PAGE_SIZE;

/// The wait between the starts of two connect attempts: SUNRPC doubles it
/// after each failed attempt, from `INIT_REEST_S` up to `MAX_REEST_S`.
pub(super) const INIT_REEST_S: u32 = 5;

/// The longest wait between connect attempts. The in-tree client lets it
/// grow to 30 s: after a link loss of 20 s its mount can then sit idle for
/// up to 30 s with the link back, waiting for the next attempt. An
/// attempt costs an ARP request and a CM REQ (or fails in address
/// resolution, after `RESOLVE_TIMEOUT_MS`), so one every 5 s while the
/// server is unreachable is cheap, and it bounds the recovery after the
/// link's return: the next attempt starts within 5 s, and a REQ lost just
/// before the return is sent again by the CM within 5 s
/// (`nfs_link_flap` holds it to 10 s over 20 losses).
pub(super) const MAX_REEST_S: u32 = 5;

/// The idle time before autoclose (the in-tree client's).
pub(super) const IDLE_DISC_S: u32 = 5 * 60;

pub(super) const BIND_S: u32 = 60;

/// The registered class (see [`ClassSlot`]).
static CLASS: ClassSlot = ClassSlot::new();

/// Every RPC's retransmit timeout: 60 s, as the in-tree client's.
static TIMEOUT: RpcTimeout = RpcTimeout::new(60 * time::HZ);

/// The RPC-over-RDMA transport class.
pub(crate) struct RdmaTransport;

impl TransportClass for RdmaTransport {
    const NAME: &'static CStr = c_str!("rdma");
    const IDENT: u32 = XPRT_TRANSPORT_RDMA;
    const NETIDS: [&'static CStr; MAX_NETIDS] = [c_str!("rdma"), c_str!("rdma6")];

    const SLOT: ClassSlotRef = ClassSlotRef::new(&CLASS);

    fn setup(args: &CreateArgs<'_>) -> Result<rpc::NewXprt> {
        if args.is_backchannel() {
            pr_warn!("backchannel transports are not supported\n");
            return Err(errno::EPROTONOSUPPORT());
        }
        let server = args.servername().unwrap_or(c_str!("(unnamed)"));
        pr_debug!("creating a transport to {}\n", server);
        let v6 = args.is_ipv6();
        let s = |secs: u32| time::ms_to_jiffies(secs.saturating_mul(1000));
        // One reading of the parameters for the transport's whole life.
        let settings = params::Settings::now();
        let p = XprtParams {
            max_slots: settings.slots,
            max_payload: MAX_PAYLOAD,
            timeout: s(60),
            reestablish: s(INIT_REEST_S),
            max_reconnect: s(MAX_REEST_S),
            idle: s(IDLE_DISC_S),
            bind: s(BIND_S),
            rpc_timeout: &TIMEOUT,
        };
        let netid = if v6 { c_str!("rdma6") } else { c_str!("rdma") };
        rpc::new_xprt::<RdmaXprt>(args, crate::kapi::compat::this_module(), &p, netid, |x| {
            Arc::pin_init(RdmaXprt::new(x, p.max_slots, settings)?, GFP_KERNEL)
        })
    }
}
