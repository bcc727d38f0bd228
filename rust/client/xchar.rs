// SPDX-License-Identifier: GPL-2.0

//! Transport characteristics (draft-rpcrdma-xcharext): ours sent once a
//! Version Two connection is up, and the server's received.

use core::sync::atomic::Ordering;

use kernel::{c_str, prelude::*};

use crate::proto::{
    v2,
    xchar::{self, Characteristics, XchOp, Xchar, XcharSpec, XcharSubset},
};
use crate::{kapi::trace, verbs::Live};

use super::{backchannel::BC_SLOTS, conn::EpShared, stats::COUNTERS};

impl EpShared {
    /// Our transport characteristics: the Receive buffer size, that
    /// replies may use Send With Invalidate, that backward requests come
    /// inline.
    fn ours(&self) -> Characteristics {
        Characteristics {
            rbsiz: self.cfg.settings.inline_read,
            req_rem_inv: true,
            brs: xchar::BkReqSup::Inline,
            ..Characteristics::DEFAULT
        }
    }

    /// Our transport characteristics, as the first OPTIONAL message of a
    /// Version Two connection (xcharext ROPT_INITXCH): the Receive buffer
    /// size, that replies may use Send With Invalidate, and that backward
    /// requests come inline. None of them changes during the connection.
    pub(super) fn send_initxch(&self, conn: &Live<'_, Self>, probe_xid: u32) {
        let ours = self.ours();
        let vals: [Xchar<'_>; 3] = ours.as_xchars();
        let fixed = [0b111u32];
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&fixed) };
        // An OPTIONAL message without payload takes an XID of the calls'
        // XID space (draft 4.2.2); the server answers nothing to it.
        let xid = probe_xid ^ 0x8000_0000;
        // A forward-direction message: its credit field asks for our
        // forward credits, as a call's does. It takes a server Receive and
        // gets no reply: the probe's reply, which just arrived, is the
        // only one outstanding, so the grant it carries pays for it
        // ([`Self::grant`]); later replies grant afresh.
        let max = self.max_requests.load(Ordering::Relaxed);
        self.grant_debt.store(1, Ordering::Relaxed);
        trace::xchar(|| self.xprt.get().addr_str(), 0, xid, 1);
        let sent = self.send_answer(conn, "ROPT_INITXCH", |buf| {
            op.encode_message(xid, max, v2::Direction::Call, buf).map_err(|_| EINVAL)
        });
        if sent {
            // Before every later call: a server that speaks xcharext has
            // it when it answers them.
            let mut peer = self.peer_xch.lock();
            peer.ours_sent = true;
            self.inline_cache.store(0, Ordering::Release);
            self.call_cache.store(0, Ordering::Release);
        }
    }

    /// A Version Two RDMA2_OPTIONAL message. The transport characteristics
    /// operations (xcharext) are understood; any other type is answered
    /// with RDMA2_ERROR / ERR_INVAL_OPTION (draft section 3.1).
    /// Before the probe's answer settles the version (the server may send
    /// its ROPT_INITXCH first), the probe is the one message of ours the
    /// server has room for: what would need an answer is dropped instead,
    /// and counted.
    pub(super) fn optional(&self, conn: &Live<'_, Self>, xid: u32, o: &v2::Optional<'_>) {
        let early = self.settled().is_none();
        let err = |e: v2::ErrorBody| {
            if early {
                return;
            }
            let h = v2::Header::error(xid, BC_SLOTS as u32, e);
            self.send_answer(conn, "RDMA2_ERROR", |buf| h.encode(buf).map_err(|_| EINVAL));
        };
        if !xchar::is_xchar_opttype(o.opttype) {
            if early {
                self.count_bad_reply(xid, c_str!("optional message before the version is settled"));
            }
            return err(v2::ErrorBody::InvalOption);
        }
        let op = match XchOp::from_optional(o) {
            Ok(op) => op,
            Err(e) => {
                trace::xchar(|| self.xprt.get().addr_str(), 1, xid, 0);
                self.count_bad_reply(xid, c_str!("malformed characteristics message"));
                return err(e.reply());
            }
        };
        COUNTERS.xchar_messages.fetch_add(1, Ordering::Relaxed);
        let code = match op {
            XchOp::InitXch { .. } => 1,
            XchOp::UpdXch { .. } => 2,
            XchOp::ReqXch { .. } => 3,
            XchOp::RespXch { .. } => 4,
        };
        trace::xchar(|| self.xprt.get().addr_str(), 1, xid, code);
        match op {
            XchOp::InitXch { .. } | XchOp::UpdXch { .. } => {
                let (before, merged, after) = {
                    let mut peer = self.peer_xch.lock();
                    let before = peer.chars.rbsiz;
                    let merged = peer.chars.merge(&op, None);
                    // It speaks xcharext: once ours went, replies may
                    // fill the Receive buffer it said.
                    peer.heard = true;
                    self.inline_cache.store(0, Ordering::Release);
                    self.call_cache.store(0, Ordering::Release);
                    (before, merged, peer.chars.rbsiz)
                };
                if let Ok(m) = merged {
                    if m.inconsistent || !m.invalid.is_empty() {
                        self.count_bad_reply(xid, c_str!("inconsistent or invalid characteristics"));
                    }
                }
                if before != after {
                    pr_info!(
                        "{}: server's receive buffer is {} bytes: calls up to {} bytes go inline\n",
                        self.xprt.get().addr_str(),
                        after,
                        after.min(self.cfg.settings.inline_write)
                    );
                }
            }
            XchOp::ReqXch { .. } if early => {
                self.count_bad_reply(xid, c_str!("characteristics request before the version is settled"));
            }
            XchOp::ReqXch { want } => {
                // Our characteristics are fixed: a request for the values
                // we already have is done, any other is rejected. The
                // answer takes the request's XID, and the direction of the
                // side that answers.
                let ours = self.ours();
                let dir = if o.direction == v2::Direction::Call { v2::Direction::Reply } else { v2::Direction::Call };
                self.send_answer(conn, "ROPT_RESPXCH", |buf| {
                    xchar::encode_fixed_response(&want, &ours, xid, BC_SLOTS as u32, dir, buf).map_err(|_| EINVAL)
                });
            }
            // We never ask the server to change anything: a response
            // answers nothing of ours (xcharext section 4).
            XchOp::RespXch { .. } => {
                self.count_bad_reply(xid, c_str!("unsolicited characteristics response"));
                err(v2::ErrorBody::InvalOption)
            }
        }
    }
}
