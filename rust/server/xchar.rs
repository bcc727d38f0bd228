// SPDX-License-Identifier: GPL-2.0

//! Transport characteristics (draft-rpcrdma-xcharext) on a Version Two
//! connection: the client's taken in as their messages arrive, ours sent
//! once, after the first reply.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use super::{recv::ConnState, stats::COUNTERS, xprt::ServerXprt};
use crate::{
    kapi::{ratelimit::RateLimit, trace},
    proto::{
        v2,
        xchar::{self, Characteristics, XchOp, Xchar, XcharSpec, XcharSubset},
    },
    verbs::{Connection, Copying, Live, SendWriter},
};

impl ConnState {
    /// Our characteristics: the Receive buffer size. Replies to backward
    /// calls take no Send With Invalidate (the default, said anyway); a
    /// server's support of backward requests is not a characteristic it
    /// reports (xcharext section 3.3).
    fn ours(&self) -> Characteristics {
        Characteristics { rbsiz: self.recv_buf, req_rem_inv: false, ..Characteristics::DEFAULT }
    }

    /// An RDMA2_OPTIONAL message from the client, taken as its Receive
    /// completes: before any call that came after it, so what it says
    /// holds for their replies. The xcharext operations are understood;
    /// other types, and an ROPT_RESPXCH (we never ask), are answered with
    /// RDMA2_ERROR / ERR_INVAL_OPTION, malformed ones with the error
    /// `XcharError::reply` names (draft-rpcrdma-version-two section 3.1,
    /// xcharext section 4).
    pub(super) fn optional(&self, x: &ServerXprt, conn: &Live<'_, ServerXprt>, xid: u32, o: &v2::Optional<'_>) {
        let credits = self.credits;
        let answer = |encode: &dyn Fn(&mut [u8]) -> Result<usize>| {
            if let Err(e) = conn.send_copied(|w: &mut SendWriter<'_, Copying>| w.copy(encode)) {
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!(
                        "rdma server: cannot answer an RDMA2_OPTIONAL message (error {}): closing the connection\n",
                        e.to_errno()
                    );
                }
                x.svc().close_later();
            }
        };
        let error = |e: v2::ErrorBody| {
            COUNTERS.errors_sent.fetch_add(1, Ordering::Relaxed);
            trace::svc_err(xid, if e == v2::ErrorBody::InvalOption { 3 } else { 2 }, 0, 0);
            answer(&|buf| v2::Header::error(xid, credits, e).encode(buf).map_err(|_| EINVAL));
        };
        if !xchar::is_xchar_opttype(o.opttype) {
            return error(v2::ErrorBody::InvalOption);
        }
        COUNTERS.xchar_messages.fetch_add(1, Ordering::Relaxed);
        let op = match XchOp::from_optional(o) {
            Ok(op) => op,
            Err(e) => return error(e.reply()),
        };
        match op {
            XchOp::InitXch { .. } | XchOp::UpdXch { .. } => {
                let mut peer = self.peer.lock();
                // Values refused (a Receive buffer below 1024) and unknown
                // characteristics are left out.
                let _ = peer.merge(&op, None);
                self.peer_rbsiz.store(peer.rbsiz, Ordering::Release);
                self.peer_rem_inv.store(peer.req_rem_inv, Ordering::Release);
            }
            // Ours are fixed: a request for what we have is done, any
            // other is rejected.
            XchOp::ReqXch { want } => {
                let ours = self.ours();
                answer(&|buf| {
                    xchar::encode_fixed_response(&want, &ours, xid, credits, v2::Direction::Reply, buf).map_err(|_| EINVAL)
                });
            }
            XchOp::RespXch { .. } => error(v2::ErrorBody::InvalOption),
        }
    }

    /// Sends our ROPT_INITXCH once on a Version Two connection, after the
    /// first reply (`xid`'s), when the client has a Receive for it. It
    /// carries no RPC: a responder's message (direction REPLY) with an XID
    /// of its own, the first reply's with a bit flipped. Its values do not
    /// change while the connection lives. Not sent is no error: the client
    /// keeps the defaults.
    pub(super) fn send_initxch_once(&self, conn: &Connection<ServerXprt>, xid: u32) {
        if self.initxch_sent.swap(true, Ordering::AcqRel) {
            return;
        }
        let ours = self.ours();
        let vals: [Xchar<'_>; 2] = [Xchar::RecvBufSize(ours.rbsiz), Xchar::ReqRemInv(ours.req_rem_inv)];
        let fixed = [0b11u32];
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&fixed) };
        let credits = self.credits;
        let _ = conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
            w.copy(|buf| op.encode_message(xid ^ 0x4000_0000, credits, v2::Direction::Reply, buf).map_err(|_| EINVAL))
        });
    }
}
