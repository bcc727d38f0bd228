// SPDX-License-Identifier: GPL-2.0
//! Proxy mode: the peer serves real NFS by passing each call on to an RPC
//! server over TCP (knfsd on the server guest) and carrying its reply back
//! the way an RPC-over-RDMA server would: inline, with the NFSv3 READ or
//! READLINK data moved into the client's Write chunk by RDMA Write, or the
//! whole reply in the client's Reply chunk. With a real file system behind
//! it, the hostile scenarios can aim at the data path (a READ's Write chunk,
//! Send With Invalidate during I/O) of a mounted client.
//!
//! Nothing here is unsafe: the RDMA side is `verbs`, the TCP side std.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use rpcrdma_proto::{
    responder::{self, CallPiece},
    v1,
};

/// A TCP connection to the RPC server the calls are passed on to.
pub struct Upstream {
    addr: SocketAddr,
    stream: Option<TcpStream>,
}

impl Upstream {
    pub fn new(addr: SocketAddr) -> Upstream {
        Upstream { addr, stream: None }
    }

    /// Passes one RPC call message on and returns the reply with the same
    /// XID (RFC 5531 record marking on the stream). One try to reconnect
    /// if the connection broke.
    pub fn call(&mut self, msg: &[u8]) -> io::Result<Vec<u8>> {
        match self.try_call(msg) {
            Ok(r) => Ok(r),
            Err(_) => {
                self.stream = None;
                self.try_call(msg)
            }
        }
    }

    fn try_call(&mut self, msg: &[u8]) -> io::Result<Vec<u8>> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        let s = self.stream.as_mut().ok_or_else(|| io::Error::other("no upstream"))?;
        let len = u32::try_from(msg.len()).map_err(|_| io::Error::other("call too long"))?;
        let mut rec = (0x8000_0000 | len).to_be_bytes().to_vec();
        rec.extend_from_slice(msg);
        s.write_all(&rec)?;
        let xid = msg.get(..4).ok_or_else(|| io::Error::other("call too short"))?;
        loop {
            let reply = read_record(s)?;
            // A reply to an earlier, abandoned call: skip it.
            if reply.get(..4) == Some(xid) && word(&reply, 1) == Some(1) {
                return Ok(reply);
            }
        }
    }
}

/// Reads one RPC record (all its fragments).
fn read_record(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut m = [0u8; 4];
        s.read_exact(&mut m)?;
        let m = u32::from_be_bytes(m);
        let len = (m & 0x7fff_ffff) as usize;
        if out.len() + len > 4 << 20 {
            return Err(io::Error::other("record over 4 MiB"));
        }
        let at = out.len();
        out.resize(at + len, 0);
        s.read_exact(&mut out[at..])?;
        if m & 0x8000_0000 != 0 {
            return Ok(out);
        }
    }
}

/// The 32-bit XDR word at word index `i`.
pub fn word(b: &[u8], i: usize) -> Option<u32> {
    let w = b.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Rounds up to a multiple of four (XDR).
pub const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Rebuilds a call from its inline part and the data of its Read chunks
/// (`data`, one per chunk of `reads`, in the read list's order) as a
/// responder does ([`responder::plan_call`]): each data item at its
/// position with its XDR roundup put back, or, when the first chunk is at
/// position zero, the whole call in that chunk (a Long Call). `None` if
/// the chunks do not fit the call.
pub fn assemble(inline: &[u8], reads: &v1::ReadList<'_>, data: &[Vec<u8>]) -> Option<Vec<u8>> {
    let long = reads.get(0).is_some_and(|r| r.position == 0);
    let inline_len = if long { None } else { Some(u32::try_from(inline.len()).ok()?) };
    let mut spans = vec![responder::ChunkSpan::default(); reads.len()];
    let nchunks = responder::walk_reads(reads, &mut spans, &mut vec![v1::Segment::default(); reads.len()])?;
    let spans = spans.get(..nchunks)?;
    let mut pieces = vec![CallPiece::Pad(0); responder::max_pieces(nchunks)];
    let (n, len) = responder::plan_call(spans, inline_len, u32::MAX, &mut pieces).ok()?;
    let base: &[u8] = if long { data.first()? } else { inline };
    let mut out = Vec::with_capacity(len as usize);
    for p in pieces.get(..n)? {
        match *p {
            CallPiece::Base { from, to } => out.extend_from_slice(base.get(from as usize..to as usize)?),
            CallPiece::Chunk { chunk, len } => out.extend_from_slice(data.get(chunk)?.get(..len as usize)?),
            CallPiece::Pad(n) => out.resize(out.len() + n as usize, 0),
        }
    }
    Some(out)
}

/// What the proxy needs to know of a call.
#[derive(Clone, Copy, Debug)]
pub struct CallInfo {
    pub prog: u32,
    pub vers: u32,
    pub procedure: u32,
}

impl CallInfo {
    /// The header fields of an RPC call message, if it is one.
    pub fn of(msg: &[u8]) -> Option<CallInfo> {
        if word(msg, 1)? != 0 {
            return None;
        }
        Some(CallInfo { prog: word(msg, 3)?, vers: word(msg, 4)?, procedure: word(msg, 5)? })
    }
}

const NFS_PROGRAM: u32 = 100003;
const NFSPROC3_READLINK: u32 = 5;
const NFSPROC3_READ: u32 = 6;
/// Bytes of an NFSv3 fattr3.
const FATTR3_LEN: usize = 84;

/// Where the results of an accepted, successful RPC reply start.
fn results_offset(reply: &[u8]) -> Option<usize> {
    // xid, REPLY, MSG_ACCEPTED, verifier (flavor, length, body), SUCCESS
    if word(reply, 1)? != 1 || word(reply, 2)? != 0 {
        return None;
    }
    let verf_len = word(reply, 4)? as usize;
    let at = 20usize.checked_add(pad4(verf_len))?;
    let stat = u32::from_be_bytes(reply.get(at..at + 4)?.try_into().ok()?);
    (stat == 0).then_some(at + 4)
}

/// The data item an RPC-over-RDMA server moves into a Write chunk (RFC 8267
/// for NFSv3: the data of READ and the path of READLINK): its offset in the
/// reply (after the length word) and its length. `None` for any other reply.
pub fn ddp_item(call: &CallInfo, reply: &[u8]) -> Option<(usize, usize)> {
    if call.prog != NFS_PROGRAM || call.vers != 3 {
        return None;
    }
    let u32_at = |o: usize| reply.get(o..o + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let mut o = results_offset(reply)?;
    if u32_at(o)? != 0 {
        return None; // an NFS error: no data
    }
    o += 4;
    // post_op_attr
    if u32_at(o)? != 0 {
        o += FATTR3_LEN;
    }
    o += 4;
    match call.procedure {
        NFSPROC3_READ => o += 8, // count, eof
        NFSPROC3_READLINK => {}
        _ => return None,
    }
    let len = u32_at(o)? as usize;
    o += 4;
    (o.checked_add(len)? <= reply.len()).then_some((o, len))
}

/// A chunk's segments as the client offered them.
pub type Chunk = Vec<v1::Segment>;

/// Spreads `data` over `chunk`'s segments in order; returns the pieces
/// `(range in data, segment index)` and fails if the chunk is too small.
pub fn spread(data_len: usize, chunk: &[v1::Segment]) -> Option<Vec<(std::ops::Range<usize>, usize)>> {
    let mut out = Vec::new();
    let mut off = 0usize;
    for (i, s) in chunk.iter().enumerate() {
        if off == data_len {
            break;
        }
        let n = (s.length as usize).min(data_len - off);
        out.push((off..off + n, i));
        off += n;
    }
    (off == data_len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with read list `reads`, decoded, for `f`.
    fn with_reads(reads: &[v1::ReadSegment], f: impl FnOnce(&v1::ReadList<'_>)) {
        let mut buf = vec![0u8; 64 + 24 * reads.len()];
        let lists = v1::ChunkLists { reads, writes: &[], reply: None };
        let n = v1::encode_msg(&mut buf, 1, 32, &lists).unwrap();
        let h = v1::Header::decode(&buf[..n], &v1::Limits::DEFAULT).unwrap();
        f(&h.body.chunks().unwrap().reads);
    }

    #[test]
    fn assemble_inserts_chunks_with_padding() {
        let rs = |position, length| v1::ReadSegment { position, segment: v1::Segment { handle: 1, length, offset: 0 } };
        let inline = [1u8, 2, 3, 4, 5, 6, 7, 8];
        // A 5-byte chunk at position 4, then the rest of the inline part.
        with_reads(&[rs(4, 5)], |r| {
            let out = assemble(&inline, r, &[vec![9, 9, 9, 9, 9]]).unwrap();
            assert_eq!(out, [1, 2, 3, 4, 9, 9, 9, 9, 9, 0, 0, 0, 5, 6, 7, 8]);
        });
        // Position zero: the whole message is the chunk.
        with_reads(&[rs(0, 4)], |r| assert_eq!(assemble(&[], r, &[vec![1, 2, 3, 4]]).unwrap(), [1, 2, 3, 4]));
        with_reads(&[rs(12, 1)], |r| assert!(assemble(&inline, r, &[vec![1]]).is_none()));
    }

    #[test]
    fn read_reply_data_found() {
        let mut r: Vec<u8> = [7u32, 1, 0, 0, 0, 0, 0, 1].iter().flat_map(|w| w.to_be_bytes()).collect();
        r.extend([0u8; FATTR3_LEN]);
        r.extend([5u32, 1, 5].iter().flat_map(|w| w.to_be_bytes()));
        r.extend([1, 2, 3, 4, 5, 0, 0, 0]);
        let call = CallInfo { prog: NFS_PROGRAM, vers: 3, procedure: NFSPROC3_READ };
        let (at, len) = ddp_item(&call, &r).unwrap();
        assert_eq!(&r[at..at + len], [1, 2, 3, 4, 5]);
        let other = CallInfo { procedure: 1, ..call };
        assert!(ddp_item(&other, &r).is_none());
    }

    #[test]
    fn spread_over_segments() {
        let seg = |length| v1::Segment { handle: 1, length, offset: 0 };
        let p = spread(10, &[seg(4), seg(4), seg(4)]).unwrap();
        assert_eq!(p, vec![(0..4, 0), (4..8, 1), (8..10, 2)]);
        assert!(spread(13, &[seg(4), seg(4), seg(4)]).is_none());
        assert!(spread(0, &[seg(4)]).unwrap().is_empty());
    }
}
