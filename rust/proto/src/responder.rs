// SPDX-License-Identifier: GPL-2.0
//! What a responder works out from a call's chunks before it moves any
//! data: where each Read chunk's bytes go in the call it rebuilds
//! ([`plan_call`]: RFC 8166 sections 3.4.5, 3.5.3 and 3.5.3.1), and which
//! parts of a reply go inline around the result payloads it placed in
//! Write chunks ([`inline_ranges`]: section 3.5.2's other side).
//!
//! Both take what a peer sent as untrusted: every position, length and
//! order is checked here, before the caller posts an RDMA Read.
//!
//! A responder that calls its requester back (RFC 8167) finds the replies
//! to those calls among the calls it receives: [`backward_reply`].

use super::{
    v1::{self, Chunks, ReadList},
    v2,
};

/// One piece of a call a responder rebuilds, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPiece {
    /// Bytes `from..to` of the call's base: the RPC message sent inline
    /// (RDMA_MSG), or the data of the position-zero Read chunk, which is
    /// the read list's first chunk (RDMA_NOMSG, a Long Call).
    Base {
        /// First byte.
        from: u32,
        /// One past the last byte.
        to: u32,
    },
    /// All `len` bytes of Read chunk `chunk` (its index among the chunks
    /// [`ReadList::chunks`] yields), at its position.
    Chunk {
        /// Index of the chunk in the read list.
        chunk: usize,
        /// Its length: the sum of its segments' lengths.
        len: u32,
    },
    /// Zero bytes: the XDR roundup of the chunk just before, which the
    /// requester leaves out of the chunk (RFC 8166 section 3.4.5.2).
    Pad(u32),
}

/// Why a call's Read chunks cannot be placed ([`plan_call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// An RDMA_MSG call has a Read chunk at position zero, or an
    /// RDMA_NOMSG call's first chunk is not at position zero.
    PositionZero,
    /// A position is not a multiple of four (XDR items are word-aligned).
    Unaligned {
        /// The position.
        position: u32,
    },
    /// A chunk's position is not past the end of the chunk before it
    /// (chunks come in increasing position order and do not overlap).
    OutOfOrder {
        /// The position.
        position: u32,
    },
    /// A position lies beyond the end of the call's base.
    Beyond {
        /// The position.
        position: u32,
    },
    /// A Read chunk carries no bytes.
    Empty,
    /// The call rebuilt would be longer than the responder takes.
    TooLong,
    /// The output has room for fewer pieces than the call needs.
    NoRoom,
}

/// Most pieces a call with `chunks` Read chunks needs: before each data
/// chunk a part of the base, the chunk and its pad, then the base's rest.
pub const fn max_pieces(chunks: usize) -> usize {
    chunks.saturating_mul(3).saturating_add(1)
}

/// A Read chunk as [`walk_reads`] found it: its position, its segments
/// and the bytes they carry. What [`plan_call`] places.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkSpan {
    /// The position its segments share.
    pub position: u32,
    /// How many segments it has (never zero).
    pub segments: usize,
    /// The sum of its segments' lengths.
    pub len: u64,
}

/// Walks the read list `reads` once, in wire order: puts each segment
/// into `segs` (in order, from its front) and each chunk (a maximal run
/// of segments sharing a position, as [`ReadList::chunks`] yields them)
/// into the front of `spans`. Returns how many chunks; `None` if there
/// are more chunks than `spans` holds or more segments than `segs` does.
pub fn walk_reads(reads: &ReadList<'_>, spans: &mut [ChunkSpan], segs: &mut [v1::Segment]) -> Option<usize> {
    let mut n = 0usize;
    let mut out = segs.iter_mut();
    for r in reads.iter() {
        *out.next()? = r.segment;
        let same = match n.checked_sub(1).and_then(|last| spans.get(last)) {
            Some(s) => s.position == r.position,
            None => false,
        };
        if !same {
            *spans.get_mut(n)? = ChunkSpan { position: r.position, segments: 0, len: 0 };
            n = n.saturating_add(1);
        }
        let s = spans.get_mut(n.checked_sub(1)?)?;
        s.segments = s.segments.saturating_add(1);
        s.len = s.len.saturating_add(u64::from(r.segment.length));
    }
    Some(n)
}

/// Plans the call a responder rebuilds from its base and its Read chunks
/// `chunks` ([`walk_reads`] found them): `inline` is the length of the RPC
/// message sent inline after an RDMA_MSG header, or `None` for an
/// RDMA_NOMSG header, whose first chunk, at position zero, carries the
/// message (a Long Call). Every other chunk is a data item, inserted where
/// its position says: positions count bytes of the call as rebuilt, each
/// chunk taking its length rounded up to a multiple of four (the roundup
/// is zeros the responder adds). The pieces go into the front of `out`;
/// returns how many, and the call's length, which is at most `max_len`.
/// Nothing about the call is assumed: positions must be word-aligned,
/// increasing and inside the base, and every chunk must carry bytes.
pub fn plan_call(
    chunks: &[ChunkSpan],
    inline: Option<u32>,
    max_len: u32,
    out: &mut [CallPiece],
) -> Result<(usize, u32), CallError> {
    let mut chunks = chunks.iter();
    // The index of the next chunk (`Enumerate` would check its count for
    // overflow: a panic path).
    let mut i = 0usize;
    let base_len = match inline {
        Some(n) => n,
        None => match chunks.next() {
            Some(c) if c.position == 0 => {
                i = 1;
                chunk_len(c.len)?
            }
            _ => return Err(CallError::PositionZero),
        },
    };
    let mut n = 0usize;
    let mut push = |p: CallPiece| -> Result<(), CallError> {
        *out.get_mut(n).ok_or(CallError::NoRoom)? = p;
        n = n.saturating_add(1);
        Ok(())
    };
    // Where the next piece starts, in the base and in the rebuilt call.
    let (mut base, mut call) = (0u32, 0u64);
    for c in chunks {
        let index = i;
        i = i.saturating_add(1);
        let position = c.position;
        if position == 0 {
            return Err(if inline.is_some() { CallError::PositionZero } else { CallError::OutOfOrder { position } });
        }
        if position % 4 != 0 {
            return Err(CallError::Unaligned { position });
        }
        // Base bytes between the end of the last piece and this chunk.
        let gap = u64::from(position).checked_sub(call).ok_or(CallError::OutOfOrder { position })?;
        let to = u64::from(base).saturating_add(gap);
        if to > u64::from(base_len) {
            return Err(CallError::Beyond { position });
        }
        let to = to as u32;
        if to > base {
            push(CallPiece::Base { from: base, to })?;
        }
        let len = chunk_len(c.len)?;
        push(CallPiece::Chunk { chunk: index, len })?;
        let pad = len.wrapping_neg() % 4;
        if pad != 0 {
            push(CallPiece::Pad(pad))?;
        }
        base = to;
        call = u64::from(position).saturating_add(u64::from(len)).saturating_add(u64::from(pad));
        if call > u64::from(max_len) {
            return Err(CallError::TooLong);
        }
    }
    if base_len > base {
        push(CallPiece::Base { from: base, to: base_len })?;
        call = call.saturating_add(u64::from(base_len - base));
    }
    if call > u64::from(max_len) {
        return Err(CallError::TooLong);
    }
    Ok((n, call as u32))
}

/// A call planned by [`plan_call`] whose one data item sits in Read
/// chunk 0, inside a base sent inline: such a call can be laid out with
/// the item's bytes beside the base (svcrdma's head, pages and tail),
/// never copied into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneItem {
    /// The item's position: the bytes of the base before it.
    pub position: u32,
    /// The item's length, as its chunk carried it.
    pub len: u32,
    /// Its XDR roundup, zeros the responder adds after it.
    pub pad: u32,
}

/// The one data item of the plan `pieces`, or `None` for any other plan
/// (a Long Call, more than one item, none).
pub fn one_item(pieces: &[CallPiece]) -> Option<OneItem> {
    let (position, len, rest) = match pieces {
        [CallPiece::Base { from: 0, to }, CallPiece::Chunk { chunk: 0, len }, rest @ ..] => (*to, *len, rest),
        _ => return None,
    };
    let (pad, rest) = match rest {
        [CallPiece::Pad(p), r @ ..] => (*p, r),
        r => (0, r),
    };
    match rest {
        [] => {}
        [CallPiece::Base { from, .. }] if *from == position => {}
        _ => return None,
    }
    Some(OneItem { position, len, pad })
}

/// A chunk's length from the sum of its segments: not zero, and small
/// enough to count in 32 bits.
fn chunk_len(total: u64) -> Result<u32, CallError> {
    match u32::try_from(total) {
        Ok(0) => Err(CallError::Empty),
        Ok(n) => Ok(n),
        Err(_) => Err(CallError::TooLong),
    }
}

/// The handle to invalidate with the reply's Send (Send With Invalidate,
/// RFC 8797 section 4.1): the one handle every segment of the call's
/// chunks names, so that it is an STag of this XID's; `None` if the call
/// offered no chunk or more than one handle (then the requester
/// invalidates its regions itself). A responder uses it only when both
/// sides set the Remote Invalidation flag. [`OneHandle`] finds it while
/// the segments are walked for something else.
pub fn single_handle(chunks: &Chunks<'_>) -> Option<u32> {
    let mut one = OneHandle::default();
    for r in chunks.reads.iter() {
        one.see(r.segment.handle);
    }
    for w in chunks.writes.iter() {
        for seg in w.iter() {
            one.see(seg.handle);
        }
    }
    if let Some(r) = &chunks.reply {
        for seg in r.iter() {
            one.see(seg.handle);
        }
    }
    one.single()
}

/// The handles of a call's segments, as they are walked: whether they
/// are all one ([`single_handle`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OneHandle {
    one: Option<u32>,
    more: bool,
}

impl OneHandle {
    /// One more segment's handle.
    #[inline]
    pub fn see(&mut self, handle: u32) {
        match self.one {
            None => self.one = Some(handle),
            Some(o) if o == handle => {}
            Some(_) => self.more = true,
        }
    }

    /// The one handle seen, if exactly one was.
    pub fn single(&self) -> Option<u32> {
        if self.more {
            None
        } else {
            self.one
        }
    }
}

/// Why the inline parts of a reply cannot be computed ([`inline_ranges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Two ranges overlap or come out of order, or one ends before it
    /// starts or past the reply.
    Overlap,
    /// The output has room for fewer ranges than needed.
    NoRoom,
}

/// The parts of a reply of `len` bytes left when the ranges `skip` (start,
/// end; in increasing order, as the upper layer places the result payloads
/// of one reply) are taken out: what a responder sends inline around the
/// payloads (each with its XDR pad) it wrote into Write chunks. The parts
/// go into the front of `out` (room for `skip.len() + 1` always suffices);
/// returns how many. (No sorting here: the kernel's objtool cannot follow
/// the panic of core's sort on an inconsistent order.)
pub fn inline_ranges(len: u32, skip: &[(u32, u32)], out: &mut [(u32, u32)]) -> Result<usize, RangeError> {
    let mut n = 0usize;
    let mut pos = 0u32;
    for &(from, to) in skip.iter() {
        if from < pos || to < from || to > len {
            return Err(RangeError::Overlap);
        }
        if from > pos {
            *out.get_mut(n).ok_or(RangeError::NoRoom)? = (pos, from);
            n = n.saturating_add(1);
        }
        pos = to;
    }
    if len > pos {
        *out.get_mut(n).ok_or(RangeError::NoRoom)? = (pos, len);
        n = n.saturating_add(1);
    }
    Ok(n)
}

/// A reply to a backward call (RFC 8167), as [`backward_reply`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackwardReply<'a> {
    /// The XID of the backward call it answers.
    pub xid: u32,
    /// The requester's grant of backward credits (RFC 8167 section 4.3).
    pub credits: u32,
    /// The RPC reply.
    pub reply: &'a [u8],
}

/// The reply to a backward call that `msg`, a message in protocol version
/// `vers` (1 or 2) that came in on a responder's Receive, is; `None` for
/// anything else (a forward call, above all). Backward replies come inline
/// with no chunk (RFC 8167 section 5.1): Version One's RDMA_MSG with empty
/// lists whose RPC message is a reply with the header's XID (the
/// convention of section 4.2, which both kernels follow), Version Two's
/// RDMA2_MSG whose header says Reply, which its RPC message must say too.
pub fn backward_reply(msg: &[u8], vers: u32) -> Option<BackwardReply<'_>> {
    let (xid, credits, reply) = match vers {
        v1::VERSION => v1::decode_plain_msg(msg)?,
        v2::RPCRDMA_VERSION_2 => {
            let (h, reply) = v2::Header::decode_with(msg, &v2::Limits::DEFAULT).ok()?;
            match h.body {
                v2::Body::Msg(c) if c.direction == v2::Direction::Reply && c.lists.is_none() => (h.xid, h.credit, reply),
                _ => return None,
            }
        }
        _ => return None,
    };
    let (rpc_xid, rest) = reply.split_first_chunk::<4>()?;
    let (direction, _) = rest.split_first_chunk::<4>()?;
    if u32::from_be_bytes(*rpc_xid) != xid || u32::from_be_bytes(*direction) != v2::MSG_REPLY {
        return None;
    }
    Some(BackwardReply { xid, credits, reply })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::{vec, vec::Vec};

    use super::*;
    use crate::v1::{encode_msg, ChunkLists, Header, Limits, ReadSegment, Segment};

    /// An RPC message `xid` of direction `dir` (0 call, 1 reply) and a
    /// few more words.
    fn rpc(xid: u32, dir: u32) -> Vec<u8> {
        let mut m = Vec::new();
        for w in [xid, dir, 0, 0, 7] {
            m.extend_from_slice(&w.to_be_bytes());
        }
        m
    }

    #[test]
    fn backward_replies_are_found_in_both_versions() {
        let body = rpc(0x1234_5678, 1);
        let mut buf = vec![0u8; 64];
        let n = encode_msg(&mut buf, 0x1234_5678, 3, &ChunkLists::NONE).unwrap();
        buf.truncate(n);
        buf.extend_from_slice(&body);
        let r = backward_reply(&buf, 1).unwrap();
        assert_eq!(r, BackwardReply { xid: 0x1234_5678, credits: 3, reply: &body[..] });
        // Not in the version the connection speaks.
        assert_eq!(backward_reply(&buf, 2), None);
        assert_eq!(backward_reply(&buf, 3), None);

        let c = v2::Chunks { direction: v2::Direction::Reply, lists: ChunkLists::NONE };
        let h = v2::Header { xid: 0x1234_5678, credit: 2, body: v2::Body::Msg(c) };
        let mut buf2 = vec![0u8; 64];
        let n = h.encode(&mut buf2).unwrap();
        buf2.truncate(n);
        buf2.extend_from_slice(&body);
        let r = backward_reply(&buf2, 2).unwrap();
        assert_eq!(r, BackwardReply { xid: 0x1234_5678, credits: 2, reply: &body[..] });
        assert_eq!(backward_reply(&buf2, 1), None);
    }

    #[test]
    fn forward_calls_and_odd_replies_are_not_backward_replies() {
        let mut buf = vec![0u8; 64];
        let n = encode_msg(&mut buf, 9, 3, &ChunkLists::NONE).unwrap();
        let with = |body: &[u8]| {
            let mut b = buf[..n].to_vec();
            b.extend_from_slice(body);
            b
        };
        // A forward call.
        assert_eq!(backward_reply(&with(&rpc(9, 0)), 1), None);
        // A reply whose XID is not the header's.
        assert_eq!(backward_reply(&with(&rpc(10, 1)), 1), None);
        // Too short to say.
        assert_eq!(backward_reply(&with(&[0, 0, 0, 9, 0, 0]), 1), None);
        // A reply with chunks.
        let w = [Segment { handle: 1, length: 8, offset: 0 }];
        let writes: &[&[Segment]] = &[&w];
        let lists = ChunkLists { reads: &[], writes, reply: None };
        let mut b = vec![0u8; 128];
        let m = encode_msg(&mut b, 9, 3, &lists).unwrap();
        b.truncate(m);
        b.extend_from_slice(&rpc(9, 1));
        assert_eq!(backward_reply(&b, 1), None);
        // Version Two: the header says Call, or the message says call.
        for (dir, rpc_dir) in [(v2::Direction::Call, 1), (v2::Direction::Reply, 0)] {
            let c = v2::Chunks { direction: dir, lists: ChunkLists::NONE };
            let h = v2::Header { xid: 9, credit: 2, body: v2::Body::Msg(c) };
            let mut b = vec![0u8; 64];
            let m = h.encode(&mut b).unwrap();
            b.truncate(m);
            b.extend_from_slice(&rpc(9, rpc_dir));
            assert_eq!(backward_reply(&b, 2), None);
        }
    }

    /// A header with read list `reads`, decoded: the list as a responder
    /// sees it.
    fn decoded(reads: &[ReadSegment], f: impl FnOnce(&ReadList<'_>)) {
        let mut buf = vec![0u8; 64 + 24 * reads.len()];
        let lists = ChunkLists { reads, writes: &[], reply: None };
        let n = encode_msg(&mut buf, 1, 32, &lists).unwrap();
        let h = Header::decode(&buf[..n], &Limits::DEFAULT).unwrap();
        f(&h.body.chunks().unwrap().reads);
    }

    fn rs(position: u32, handle: u32, length: u32) -> ReadSegment {
        ReadSegment { position, segment: Segment { handle, length, offset: 0x1000 * u64::from(handle) } }
    }

    fn plan(reads: &[ReadSegment], inline: Option<u32>, max: u32) -> Result<Vec<CallPiece>, CallError> {
        let mut r = Err(CallError::NoRoom);
        decoded(reads, |l| {
            let spans = spans_of(l);
            let mut out = vec![CallPiece::Pad(0); max_pieces(spans.len())];
            r = plan_call(&spans, inline, max, &mut out).map(|(n, len)| {
                let pieces = out[..n].to_vec();
                assert_eq!(len, pieces.iter().map(piece_len).sum::<u32>());
                pieces
            });
        });
        r
    }

    /// The chunks of `l` as one walk finds them, checked against
    /// [`ReadList::chunks`] and its segments in order.
    fn spans_of(l: &ReadList<'_>) -> Vec<ChunkSpan> {
        let mut spans = vec![ChunkSpan::default(); l.len()];
        let mut segs = vec![Segment::default(); l.len()];
        let n = walk_reads(l, &mut spans, &mut segs).unwrap();
        spans.truncate(n);
        let want: Vec<ChunkSpan> =
            l.chunks().map(|c| ChunkSpan { position: c.position, segments: c.segments.len(), len: c.segments.total_length() }).collect();
        assert_eq!(spans, want);
        assert_eq!(segs, l.iter().map(|r| r.segment).collect::<Vec<_>>());
        spans
    }

    /// A walk stops where its spans or its room for segments end.
    #[test]
    fn walk_stops_where_it_must() {
        decoded(&[rs(8, 1, 4), rs(8, 2, 4), rs(20, 3, 4)], |l| {
            let mut spans = [ChunkSpan::default(); 2];
            let mut segs = [Segment::default(); 3];
            assert_eq!(walk_reads(l, &mut spans, &mut segs), Some(2));
            assert_eq!(spans[0], ChunkSpan { position: 8, segments: 2, len: 8 });
            assert_eq!(segs[2], rs(20, 3, 4).segment);
            assert_eq!(walk_reads(l, &mut spans[..1], &mut segs), None);
            assert_eq!(walk_reads(l, &mut spans, &mut segs[..2]), None);
            assert_eq!(walk_reads(&ReadList::EMPTY, &mut [], &mut []), Some(0));
        });
    }

    fn piece_len(p: &CallPiece) -> u32 {
        match *p {
            CallPiece::Base { from, to } => to - from,
            CallPiece::Chunk { len, .. } => len,
            CallPiece::Pad(n) => n,
        }
    }

    use CallPiece::{Base, Chunk, Pad};

    /// An NFSv3 WRITE as our client and the C client send it: the data in
    /// one chunk (two segments) at the end of the head, the rest inline.
    #[test]
    fn write_data_goes_at_its_position() {
        let reads = [rs(120, 1, 4096), rs(120, 2, 4096)];
        assert_eq!(plan(&reads, Some(120), 1 << 20), Ok(vec![Base { from: 0, to: 120 }, Chunk { chunk: 0, len: 8192 }]));
        // With a tail inline after the data (an NFSv4 COMPOUND's GETATTR).
        assert_eq!(
            plan(&reads, Some(148), 1 << 20),
            Ok(vec![Base { from: 0, to: 120 }, Chunk { chunk: 0, len: 8192 }, Base { from: 120, to: 148 }])
        );
    }

    /// A WRITE's one data item is found, with or without an inline rest
    /// or a roundup; other plans have none.
    #[test]
    fn one_item_is_found_only_where_there_is_one() {
        let reads = [rs(120, 1, 4096), rs(120, 2, 4096)];
        let p = plan(&reads, Some(148), 1 << 20).unwrap();
        assert_eq!(one_item(&p), Some(OneItem { position: 120, len: 8192, pad: 0 }));
        let p = plan(&reads, Some(120), 1 << 20).unwrap();
        assert_eq!(one_item(&p), Some(OneItem { position: 120, len: 8192, pad: 0 }));
        let p = plan(&[rs(8, 1, 5)], Some(16), 100).unwrap();
        assert_eq!(one_item(&p), Some(OneItem { position: 8, len: 5, pad: 3 }));
        // Two items; a Long Call with one; a Long Call alone.
        assert_eq!(one_item(&plan(&[rs(8, 1, 5), rs(20, 2, 3)], Some(16), 100).unwrap()), None);
        assert_eq!(one_item(&plan(&[rs(0, 1, 200), rs(100, 2, 65536)], None, 1 << 20).unwrap()), None);
        assert_eq!(one_item(&plan(&[rs(0, 1, 3000)], None, 1 << 20).unwrap()), None);
        // Pieces out of the shape a plan gives.
        assert_eq!(one_item(&[Base { from: 0, to: 8 }, Chunk { chunk: 0, len: 4 }, Base { from: 4, to: 16 }]), None);
        assert_eq!(one_item(&[Chunk { chunk: 0, len: 4 }]), None);
    }

    /// Data not a multiple of four gets its roundup back, as zeros, before
    /// the inline rest; the next chunk's position counts it.
    #[test]
    fn roundup_is_put_back() {
        let reads = [rs(8, 1, 5), rs(20, 2, 3)];
        assert_eq!(
            plan(&reads, Some(16), 100),
            Ok(vec![
                Base { from: 0, to: 8 },
                Chunk { chunk: 0, len: 5 },
                Pad(3),
                Base { from: 8, to: 12 },
                Chunk { chunk: 1, len: 3 },
                Pad(1),
                Base { from: 12, to: 16 },
            ])
        );
    }

    /// A Long Call: the message is the position-zero chunk; a data chunk
    /// after it is placed into it.
    #[test]
    fn long_call_is_the_position_zero_chunk() {
        let reads = [rs(0, 1, 3000), rs(0, 2, 2000)];
        assert_eq!(plan(&reads, None, 1 << 20), Ok(vec![Base { from: 0, to: 5000 }]));
        let reads = [rs(0, 1, 200), rs(100, 2, 65536)];
        assert_eq!(
            plan(&reads, None, 1 << 20),
            Ok(vec![Base { from: 0, to: 100 }, Chunk { chunk: 1, len: 65536 }, Base { from: 100, to: 200 }])
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        // Position zero in RDMA_MSG; none in RDMA_NOMSG.
        assert_eq!(plan(&[rs(0, 1, 8)], Some(8), 100), Err(CallError::PositionZero));
        assert_eq!(plan(&[rs(4, 1, 8)], None, 100), Err(CallError::PositionZero));
        assert_eq!(plan(&[], None, 100), Err(CallError::PositionZero));
        // A second run at position zero in a Long Call.
        assert_eq!(plan(&[rs(0, 1, 8), rs(4, 2, 4), rs(0, 3, 4)], None, 100), Err(CallError::OutOfOrder { position: 0 }));
        assert_eq!(plan(&[rs(6, 1, 8)], Some(8), 100), Err(CallError::Unaligned { position: 6 }));
        // Decreasing, and overlapping the chunk before.
        assert_eq!(plan(&[rs(8, 1, 8), rs(4, 2, 8)], Some(8), 100), Err(CallError::OutOfOrder { position: 4 }));
        assert_eq!(plan(&[rs(4, 1, 8), rs(8, 2, 8)], Some(8), 100), Err(CallError::OutOfOrder { position: 8 }));
        assert_eq!(plan(&[rs(12, 1, 8)], Some(8), 100), Err(CallError::Beyond { position: 12 }));
        assert_eq!(plan(&[rs(4, 1, 0)], Some(8), 100), Err(CallError::Empty));
        assert_eq!(plan(&[rs(0, 1, 0)], None, 100), Err(CallError::Empty));
        // Too long: 8 inline + 93 of data; and lengths past 32 bits.
        assert_eq!(plan(&[rs(4, 1, 93)], Some(8), 100), Err(CallError::TooLong));
        assert_eq!(plan(&[rs(4, 1, 92)], Some(8), 100).map(|p| p.len()), Ok(3));
        assert_eq!(plan(&[rs(4, 1, u32::MAX), rs(4, 2, 2)], Some(8), u32::MAX), Err(CallError::TooLong));
        decoded(&[rs(4, 1, 8)], |l| {
            let mut out = [Pad(0); 2];
            assert_eq!(plan_call(&spans_of(l), Some(8), 100, &mut out), Err(CallError::NoRoom));
        });
    }

    /// Random calls, each cut into a base and data items the way a
    /// requester does: the plan rebuilds every byte, and never reads the
    /// base past its end or a chunk other than whole.
    #[test]
    fn plans_rebuild_random_calls() {
        let mut rng = crate::testutil::Rng(0x05e7_ca11);
        for _ in 0..5_000 {
            // The call: words, some of them data items of random length.
            let items = rng.below(4) as usize;
            let mut call: Vec<u8> = Vec::new();
            let mut base: Vec<u8> = Vec::new();
            let mut data: Vec<Vec<u8>> = Vec::new();
            let mut reads: Vec<ReadSegment> = Vec::new();
            let nomsg = rng.below(3) == 0;
            let pz = if nomsg { 1 } else { 0 };
            for i in 0..=items {
                for _ in 0..rng.below(6) {
                    let w = rng.u32().to_be_bytes();
                    call.extend_from_slice(&w);
                    base.extend_from_slice(&w);
                }
                if i == items || call.is_empty() {
                    continue;
                }
                let len = 1 + rng.below(300) as usize;
                let d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let position = call.len() as u32;
                call.extend_from_slice(&d);
                call.resize(call.len().next_multiple_of(4), 0);
                // Split over one to three segments.
                let cut = rng.below(len as u64) as u32;
                let handle = (pz + data.len() + 1) as u32;
                if cut == 0 {
                    reads.push(rs(position, handle, len as u32));
                } else {
                    reads.push(rs(position, handle, cut));
                    reads.push(rs(position, handle + 100, len as u32 - cut));
                }
                data.push(d);
            }
            if nomsg {
                if base.is_empty() {
                    base.extend_from_slice(&[0, 0, 0, 1]);
                    call = base.clone();
                    data.clear();
                    reads.clear();
                }
                reads.insert(0, rs(0, 1000, base.len() as u32));
            }
            let max = call.len() as u32 + rng.below(3) as u32;
            let got = plan(&reads, if nomsg { None } else { Some(base.len() as u32) }, max);
            let pieces = got.unwrap_or_else(|e| panic!("{e:?} for {reads:?}"));
            let mut rebuilt = Vec::new();
            for p in pieces {
                match p {
                    Base { from, to } => rebuilt.extend_from_slice(&base[from as usize..to as usize]),
                    Chunk { chunk, len } => {
                        let d = &data[chunk - pz];
                        assert_eq!(d.len(), len as usize);
                        rebuilt.extend_from_slice(d);
                    }
                    Pad(n) => rebuilt.extend(core::iter::repeat(0).take(n as usize)),
                }
            }
            assert_eq!(rebuilt, call);
            if !call.is_empty() {
                let short = call.len() as u32 - 1;
                assert_eq!(plan(&reads, if nomsg { None } else { Some(base.len() as u32) }, short), Err(CallError::TooLong));
            }
        }
    }

    #[test]
    fn one_handle_is_invalidated_never_two() {
        let seg = |handle| Segment { handle, length: 4096, offset: 0x1000 };
        let check = |reads: &[ReadSegment], writes: &[&[Segment]], reply: Option<&[Segment]>| {
            let mut buf = vec![0u8; 512];
            let n = encode_msg(&mut buf, 1, 32, &ChunkLists { reads, writes, reply }).unwrap();
            let h = Header::decode(&buf[..n], &Limits::DEFAULT).unwrap();
            single_handle(h.body.chunks().unwrap())
        };
        assert_eq!(check(&[], &[], None), None);
        assert_eq!(check(&[rs(120, 7, 100), rs(120, 7, 100)], &[], None), Some(7));
        assert_eq!(check(&[], &[&[seg(9), seg(9)]], Some(&[seg(9)])), Some(9));
        assert_eq!(check(&[], &[&[seg(9)]], Some(&[seg(8)])), None);
        assert_eq!(check(&[rs(120, 7, 100)], &[], Some(&[seg(8)])), None);
        assert_eq!(check(&[], &[&[seg(9)], &[seg(10)]], None), None);
    }

    #[test]
    fn inline_ranges_skip_payloads() {
        let mut out = [(0, 0); 4];
        assert_eq!(inline_ranges(100, &[(8, 20), (40, 60)], &mut out), Ok(3));
        assert_eq!(&out[..3], &[(0, 8), (20, 40), (60, 100)]);
        assert_eq!(inline_ranges(100, &[(40, 60), (8, 20)], &mut out), Err(RangeError::Overlap));
        assert_eq!(inline_ranges(100, &[(0, 100)], &mut out), Ok(0));
        assert_eq!(inline_ranges(100, &[], &mut out), Ok(1));
        assert_eq!(out[0], (0, 100));
        assert_eq!(inline_ranges(100, &[(0, 10), (5, 20)], &mut out), Err(RangeError::Overlap));
        assert_eq!(inline_ranges(100, &[(10, 5)], &mut out), Err(RangeError::Overlap));
        assert_eq!(inline_ranges(100, &[(90, 104)], &mut out), Err(RangeError::Overlap));
        assert_eq!(inline_ranges(100, &[(10, 20)], &mut out[..1]), Err(RangeError::NoRoom));
    }
}
