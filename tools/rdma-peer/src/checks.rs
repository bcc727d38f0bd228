// SPDX-License-Identifier: GPL-2.0
//! Checks of every message the client sends, besides its credits
//! (`credits`): what RPC-over-RDMA requires of each message by itself.

use rpcrdma_proto::{v1, v2};

/// The header's XID and the RPC message's, if an RDMA_MSG of either
/// version carries an RPC message whose XID differs from its header's
/// (RFC 8166 section 4.1: `rdma_xid` mirrors the RPC XID).
pub fn xid_mismatch(msg: &[u8]) -> Option<(u32, u32)> {
    let p = v1::peek(msg).ok()?;
    let (xid, payload) = match p.vers {
        v1::VERSION => match v1::Header::decode_split(msg, &v1::Limits::DEFAULT).ok()? {
            (h @ v1::Header { body: v1::Body::Msg(_), .. }, payload) => (h.xid, payload),
            _ => return None,
        },
        v2::RPCRDMA_VERSION_2 => match v2::Header::decode(msg).ok()? {
            (h @ v2::Header { body: v2::Body::Msg(_), .. }, payload) => (h.xid, payload),
            _ => return None,
        },
        _ => return None,
    };
    let w = payload.get(..4)?;
    let rpc = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
    (rpc != xid).then_some((xid, rpc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    #[test]
    fn rpc_xid_must_mirror_the_header() {
        // RDMA_MSG, no chunks, then an RPC call.
        let good = words(&[7, 1, 8, 0, 0, 0, 0, 7, 0, 2]);
        assert_eq!(xid_mismatch(&good), None);
        let bad = words(&[7, 1, 8, 0, 0, 0, 0, 9, 0, 2]);
        assert_eq!(xid_mismatch(&bad), Some((7, 9)));
        // RDMA_NOMSG and RDMA_ERROR carry no RPC message here.
        assert_eq!(xid_mismatch(&words(&[7, 1, 8, 1, 0, 0, 0])), None);
        assert_eq!(xid_mismatch(&words(&[7, 1, 8, 4, 2])), None);
        // Version Two: the direction word, then the RPC message.
        let v2 = words(&[7, 2, 8, 0, 0, 0, 0, 0, 9, 0, 2]);
        assert_eq!(xid_mismatch(&v2), Some((7, 9)));
        // Too short for anything.
        assert_eq!(xid_mismatch(&[0, 0]), None);
    }
}
