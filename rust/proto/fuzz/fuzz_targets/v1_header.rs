// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the RPC-over-RDMA version 1 header decoder.
//!
//! Any input must decode without panicking; whatever decodes must re-encode
//! (both from the decoded views and from plain structs) to exactly the header
//! bytes it came from, and decode again to the same value. The shortcuts for
//! the two commonest reply headers must agree with the decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::v1::{self, Body, ChunkLists, ErrorBody, Header, Limits, ReadSegment, Segment};

/// Re-encodes `h` through the slice-based encoder.
fn encode_from_structs(h: &Header<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; h.header_len];
    let n = match h.body {
        Body::Done => v1::encode_done(&mut buf, h.xid, h.credits),
        Body::Error(ErrorBody::Vers { low, high }) => v1::encode_err_vers(&mut buf, h.xid, h.credits, low, high),
        Body::Error(ErrorBody::Chunk) => v1::encode_err_chunk(&mut buf, h.xid, h.credits),
        Body::Msg(c) | Body::NoMsg(c) | Body::Msgp { chunks: c, .. } => {
            let reads: Vec<ReadSegment> = c.reads.iter().collect();
            let writes: Vec<Vec<Segment>> = c.writes.iter().map(|a| a.iter().collect()).collect();
            let write_refs: Vec<&[Segment]> = writes.iter().map(Vec::as_slice).collect();
            let reply: Option<Vec<Segment>> = c.reply.map(|a| a.iter().collect());
            let lists = ChunkLists { reads: &reads, writes: &write_refs, reply: reply.as_deref() };
            let body = match h.body {
                Body::Msg(_) => Body::Msg(lists),
                Body::NoMsg(_) => Body::NoMsg(lists),
                Body::Msgp { align, thresh, .. } => Body::Msgp { align, thresh, chunks: lists },
                Body::Done | Body::Error(_) => unreachable!(),
            };
            assert_eq!(v1::encoded_len(&body), h.header_len);
            v1::encode(&mut buf, h.xid, h.credits, &body)
        }
    };
    assert_eq!(n, Ok(h.header_len));
    buf
}

fuzz_target!(|data: &[u8]| {
    let _ = v1::peek(data);
    let _ = v1::decode_error_any_version(data);
    let full = Header::decode_split(data, &Limits::DEFAULT);
    if let Some((xid, credits, payload)) = v1::decode_plain_msg(data) {
        let (h, rest) = full.expect("a plain RDMA_MSG decodes");
        assert_eq!((h.xid, h.credits, rest), (xid, credits, payload));
        assert_eq!(h.body, Body::Msg(v1::Chunks::EMPTY));
    }
    if let Some((xid, credits, segs, payload)) = v1::decode_one_write_msg(data) {
        let (h, rest) = full.expect("an RDMA_MSG with one Write segment decodes");
        assert_eq!((h.xid, h.credits, rest), (xid, credits, payload));
        let Body::Msg(c) = h.body else { panic!("not RDMA_MSG") };
        assert!(c.reads.is_empty() && c.reply.is_none());
        assert_eq!(c.writes.single(), Some(segs));
        assert_eq!(segs.len(), 1);
    }
    let small = Limits { max_read_segments: 4, max_write_chunks: 2, max_chunk_segments: 4, max_write_segments: 6 };
    for limits in [Limits::UNBOUNDED, Limits::DEFAULT, small] {
        let Ok(h) = Header::decode(data, &limits) else { continue };
        let header = &data[..h.header_len];
        assert_eq!(h.encoded_len(), h.header_len);

        let mut views = vec![0u8; h.header_len];
        assert_eq!(h.encode(&mut views), Ok(h.header_len));
        assert_eq!(views, header);

        let structs = encode_from_structs(&h);
        assert_eq!(structs, header);

        let again = Header::decode(&structs, &limits).expect("re-encoded header must decode");
        assert_eq!(again, h);
        if let Some(c) = h.body.chunks() {
            assert_eq!(c.reads.iter().count(), c.reads.len());
            assert_eq!(c.reads.chunks().map(|k| k.segments.len()).sum::<usize>(), c.reads.len());
            assert_eq!(c.writes.iter().map(|a| a.len()).sum::<usize>(), c.writes.segment_count());
            let only = if c.writes.len() == 1 { c.writes.iter().next() } else { None };
            assert_eq!(c.writes.single(), only);
        }
    }
});
