// SPDX-License-Identifier: GPL-2.0

//! Accepting a connection (RFC 8166 section 3.3, RFC 8797): from a server
//! thread, the client's private data read, ours sent back, queues sized
//! for the credits granted.

use core::sync::atomic::Ordering;

use kernel::{prelude::*, sync::Arc};

use super::{
    backchannel::BC_REQUESTS,
    listen::ListenState,
    recv::{ConnParams, ConnState},
    stats::COUNTERS,
    xprt::{Role, ServerXprt},
};
use crate::{
    kapi::{self, svc::NewXprt, trace},
    proto::cm::{self, PrivateData},
    verbs::{Connection, QpConfig, MAX_SEND_SGES},
};

/// Credits granted to each client when `server_credits` says none that
/// can be used: svcrdma's default too.
const CREDITS: u32 = 64;

/// Fewest and most credits `server_credits` may set.
const MIN_CREDITS: u32 = 8;
const MAX_CREDITS: u32 = 512;

/// Credits a connection accepted now grants (`server_credits`, clamped):
/// the Receives it has for calls.
fn granted_credits() -> u32 {
    match kapi::params::read().server_credits {
        0 => CREDITS,
        n => n.clamp(MIN_CREDITS, MAX_CREDITS),
    }
}

/// Most RDMA Reads a connection has in flight (svcrdma's default too).
const MAX_READS: u32 = 16;

/// Bytes of a Receive buffer: the largest call taken inline.
const INLINE_RECV: u32 = 4096;

/// Most bytes of a Send buffer: the largest reply sent inline, when the
/// client's Receives take it (RFC 8797, or its Version Two transport
/// characteristics). Room for a 4 KiB READ's data and its reply's
/// header: such a reply needs no Write chunk, so the client registers
/// nothing and the server writes nothing.
const INLINE_SEND: u32 = 8192;

/// Bytes of a connection's Send buffers: [`INLINE_SEND`], or less when
/// the client's private data says its Receives are smaller (a reply is
/// never larger than those, nor a backward call: RFC 8797's sizes bound
/// both directions' inline messages), so that a Version One client's
/// connection does not keep buffers it can never fill. Without private
/// data, all of it: the client's Version Two transport characteristics
/// may still say its Receives are larger than RFC 8797's default.
fn send_buf_size(peer: Option<&PrivateData>) -> u32 {
    peer.map_or(INLINE_SEND, |p| INLINE_SEND.min(p.recv_size))
}

/// Queues for a connection made with `p`: its Receives
/// ([`ConnParams::recvs`]), a Send buffer of `p.send_buf` bytes per
/// credit and per backward call in flight (a reply per call in flight, a
/// backward call each), R/W operations for the forward calls
/// (a call's RDMA Reads, a reply's RDMA Writes), no memory regions (the
/// server registers nothing: the R/W API maps its pages). The Send Queue
/// takes the Sends and the R/W operations' work requests (four per
/// credit), each of which carries up to [`MAX_SEND_SGES`] pages, or the
/// device's `max_send_sge` if fewer (a 1 MiB payload takes 32 on rxe):
/// room for several such beside the Sends; more wait for room.
fn config(max_send_sge: u32, p: &ConnParams) -> QpConfig {
    let credits = p.credits;
    QpConfig {
        send_bufs: (credits + BC_REQUESTS) as usize,
        send_buf_size: p.send_buf as usize,
        send_sges: MAX_SEND_SGES.min(max_send_sge as usize).max(1),
        recv_bufs: p.recvs() as usize,
        recv_buf_size: INLINE_RECV as usize,
        recv_batch: 1,
        mrs: 0,
        max_mrs: 0,
        mr_pages: 1,
        send_wrs: 4 * credits as usize + BC_REQUESTS as usize,
        max_send_regs: 0,
        rdma_ctxs: credits,
        signal_interval: 1,
    }
}

/// Accepts the oldest request waiting on the listener `l` (of `x`), for
/// the core's `xpo_accept`: the new connection's transport, or `None`
/// (nothing waits, or this one failed: it was refused).
pub(super) fn accept(x: &ServerXprt, l: &ListenState, new: NewXprt<'_, ServerXprt>) -> Option<Arc<ServerXprt>> {
    let req = l.next_request(x)?;
    let peer = PrivateData::find(req.private_data());
    // We send Send With Invalidate to a client that takes it.
    let send_buf = send_buf_size(peer.as_ref());
    let ours = cm::negotiate(send_buf, INLINE_RECV, true, peer.as_ref());
    let (local, remote) = req.addrs();
    let params = ConnParams {
        credits: granted_credits(),
        send_buf,
        recv_buf: INLINE_RECV,
        send_max: ours.send_threshold,
        remote_invalidate: ours.remote_invalidate,
        versions: kapi::params::read().versions,
    };
    let made = ConnState::new(&params)
        .and_then(|state| ServerXprt::new(new.xprt(local, Some(remote))?, Role::Conn(state)));
    let conn_x = match made {
        Ok(c) => c,
        Err(e) => {
            pr_warn!("rdma server: cannot accept a connection: error {}\n", e.to_errno());
            return None;
        }
    };
    // Our buffers' sizes (RFC 8797: each side's own; the client takes the
    // smaller of its own and ours).
    let pdata = PrivateData::new(send_buf, INLINE_RECV, false).to_bytes();
    // RDMA Reads in flight (for Read chunks): as many as the client's
    // responder resources and our device allow, at most `MAX_READS`.
    let caps = req.device_caps().ok();
    let sges = caps.map_or(1, |c| c.max_send_sge);
    let ord = caps.map_or(0, |c| c.max_qp_init_rd_atom).min(u32::from(req.initiator_depth())).min(MAX_READS);
    match Connection::accept(req, conn_x.clone(), config(sges, &params), &pdata, ord as u8) {
        Ok(c) => {
            let c = Arc::new(c, GFP_KERNEL).ok()?;
            if let Role::Conn(s) = &conn_x.role {
                s.set_connection(c.clone());
            }
            // For the core's calls; its `free` gives it back. (Never
            // refused: a new transport.)
            if let Err(c) = conn_x.svc().attach(c) {
                drop(c);
            }
            COUNTERS.connections.fetch_add(1, Ordering::Relaxed);
            trace::svc_accept(|| conn_x.svc().peer_text(), 0);
            Some(conn_x)
        }
        Err((e, req)) => {
            pr_warn!("rdma server: cannot accept a connection: error {}\n", e.to_errno());
            trace::svc_accept(|| conn_x.svc().peer_text(), e.to_errno());
            // Refused, out of any lock.
            drop(req);
            None
        }
    }
}
