// SPDX-License-Identifier: GPL-2.0

//! Replies (RFC 8166 sections 4 and 5): an RDMA_MSG transport header and
//! the reply copied after it into one Send; RDMA_ERROR for a call this
//! server cannot carry (ERR_CHUNK) or a version it does not speak
//! (ERR_VERS).

use kernel::prelude::*;

use super::{recv::ConnState, xprt::ServerXprt};
use crate::{
    kapi::{errno, svc::SendRqst},
    proto::v1,
    verbs::{Connection, Copying, SendWriter},
};

/// How long a reply waits for a Send buffer before the connection is
/// given up.
const SEND_WAIT_MS: u32 = 10_000;

impl ConnState {
    /// Sends the reply of `x`'s request `rq` inline, whether or not the
    /// call offered a Reply chunk (its header returns none: the reply is
    /// in the Send); a reply larger than the client takes inline is
    /// answered with RDMA_ERROR (ERR_CHUNK: this step writes no chunk). Waits for a Send buffer when all are
    /// in use. A reply that cannot be sent closes the connection: its
    /// call would otherwise wait for ever.
    pub(super) fn sendto(&self, x: &ServerXprt, rq: &SendRqst<'_>) -> Result<u32> {
        let r = self.send_reply(rq);
        if r.is_err() {
            x.svc().close_later();
        }
        r
    }

    fn send_reply(&self, rq: &SendRqst<'_>) -> Result<u32> {
        let conn = self.connection().ok_or_else(errno::ENOTCONN)?;
        let (xid, credits) = (rq.xid(), self.credits);
        let max = self.send_max as usize;
        loop {
            let seen = self.sends_seen();
            let sent = conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
                let room = w.room();
                let room = room.get_mut(..max.min(room.len())).unwrap_or_default();
                let n = v1::encode_msg(room, xid, credits, &v1::ChunkLists::NONE).map_err(|_| EINVAL)?;
                let m = rq.copy_reply(room.get_mut(n..).unwrap_or_default())?;
                w.copied(n.saturating_add(m))
            });
            match sent {
                Ok(()) => return Ok(rq.reply_len()),
                Err(e) if e == errno::ENOBUFS() => self.wait_sends(seen, SEND_WAIT_MS)?,
                Err(e) if e == errno::EMSGSIZE() => return send_error_chunk(&conn, xid, credits).map(|()| 0),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Sends RDMA_ERROR ERR_CHUNK for the call `xid`. An error: the caller
/// closes the connection (the call would wait for ever).
pub(super) fn send_error_chunk(conn: &Connection<ServerXprt>, xid: u32, credits: u32) -> Result {
    conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
        let n = v1::encode_err_chunk(w.room(), xid, credits).map_err(|_| EINVAL)?;
        w.copied(n)
    })
}

/// Sends RDMA_ERROR ERR_VERS (versions 1 to 1) for the message `xid`.
pub(super) fn send_error_vers(conn: &Connection<ServerXprt>, xid: u32, credits: u32) -> Result {
    conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
        let n = v1::encode_err_vers(w.room(), xid, credits, 1, 1).map_err(|_| EINVAL)?;
        w.copied(n)
    })
}
