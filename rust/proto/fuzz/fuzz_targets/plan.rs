// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the chunk planner (`plan::plan_chunks`), its shortcuts
//! (`plan_small`, `plan_one_mr`) and the MR splitter.
//!
//! The input gives the limits and the shapes of a send and a receive
//! `xdr_buf`. Whatever the planner accepts must hold together: the headers
//! and inline parts fit the thresholds, every chunk splits into exactly the
//! segments planned (no more than the limit), each MR within the depth,
//! and the extents cover the chunk's regions byte for byte, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::plan::{
    self, call_header_len, CallPlan, Kvec, Limits, MrExtent, Regions, ReplyPlan, XdrBufDesc, INLINE_REPLY_HEADER_LEN,
};

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u32(&mut self) -> u32 {
        let (w, rest) = self.0.split_at_checked(4).unwrap_or((&[0, 0, 0, 0], &[]));
        self.0 = rest;
        u32::from_le_bytes([w[0], w[1], w[2], w[3]])
    }
    fn buf(&mut self, small: bool) -> XdrBufDesc {
        let cap = if small { 0x3_ffff } else { u32::MAX };
        let head = Kvec { page_offset: self.u32() % 4096, len: self.u32() & cap };
        let tail = Kvec { page_offset: self.u32() % 4096, len: self.u32() & cap };
        let page_base = self.u32() & cap;
        let page_len = self.u32() & cap;
        let flags = self.u32() & 3;
        let len = if self.u32() & 1 == 0 { head.len.wrapping_add(page_len).wrapping_add(tail.len) } else { self.u32() & cap };
        XdrBufDesc { head, page_base, page_len, tail, len, flags }
    }
}

/// Splits `regions` and checks the extents against them.
fn check_split(regions: &Regions, l: &Limits, segments: u32) {
    let mut out = [MrExtent::default(); 64];
    let n = plan::split_regions(regions.as_slice(), l.geometry(), l.max_segments, &mut out)
        .expect("a planned chunk must split");
    assert_eq!(n as u32, segments, "extents differ from the planned segment count");
    assert!(segments <= l.max_segments);
    let mut chunk_offset = 0u64;
    let mut it = out[..n].iter().peekable();
    for r in regions.as_slice() {
        let mut covered = 0u64;
        while covered < u64::from(r.len) {
            let e = it.next().expect("a region left uncovered");
            assert_eq!(e.kind, r.kind);
            assert!(e.npages >= 1 && e.npages <= l.max_pages_per_mr);
            assert!(e.len > 0);
            assert_eq!(u64::from(e.region_offset), covered);
            assert_eq!(u64::from(e.chunk_offset), chunk_offset);
            assert!(u64::from(e.offset) + u64::from(e.len) <= u64::from(e.npages) * u64::from(l.page_size));
            covered += u64::from(e.len);
            chunk_offset += u64::from(e.len);
        }
        assert_eq!(covered, u64::from(r.len));
    }
    assert!(it.next().is_none(), "extents beyond the regions");
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let small = inp.u32() & 1 == 0;
    let l = Limits {
        inline_send: inp.u32() % 0x1_0000,
        inline_recv: inp.u32() % 0x1_0000,
        max_send_sge: inp.u32() % 40,
        page_size: 4096,
        max_pages_per_mr: 1 + inp.u32() % 300,
        max_segments: inp.u32() % 40,
        pullup_threshold: inp.u32() % 0x1_0000,
        write_pad_segment: inp.u32() & 1 == 1,
    };
    let ddp = inp.u32() & 1 == 1;
    let snd = inp.buf(small);
    let rcv = inp.buf(small);
    let general = plan::plan_chunks(&snd, &rcv, ddp, &l);

    // The shortcuts decide, where they do, as the general planner does:
    // plan_small under any limits that validate, plan_one_mr too when no
    // Write pad segment is asked for (its extent is the chunk's one MR).
    if l.validate().is_ok() {
        if let Some(p) = plan::plan_small(&snd, rcv.len, l.inline_send, l.inline_recv, l.pullup_threshold) {
            assert_eq!(general, Ok(p), "plan_small differs");
        }
        let thresholds = (l.inline_send, l.inline_recv);
        let one = plan::plan_one_mr(&snd, &rcv, ddp, thresholds, l.pullup_threshold, l.geometry());
        if let (Some((c, r, ext)), false) = (one, l.write_pad_segment) {
            assert_eq!(general, Ok((c, r)), "plan_one_mr differs");
            let regions = if c.read_segments() > 0 { c.chunk_regions(&snd) } else { r.chunk_regions(&rcv) };
            let mut out = [MrExtent::default(); 2];
            assert_eq!(plan::split_regions(regions.as_slice(), l.geometry(), l.max_segments, &mut out), Ok(1));
            assert_eq!(out[0], ext, "plan_one_mr's extent differs");
        }
    }
    let Ok((call, reply)) = general else { return };

    // The reply: inline only if it fits, otherwise a chunk that splits
    // exactly as planned and whose echoing header fits.
    assert!(reply.reply_header_len() <= l.inline_recv);
    match reply {
        ReplyPlan::Inline => assert!(u64::from(rcv.len) + u64::from(INLINE_REPLY_HEADER_LEN) <= u64::from(l.inline_recv)),
        ReplyPlan::WriteChunk { len, .. } => {
            assert_eq!(len, rcv.page_len);
            assert!(reply.write_chunk_segments().is_some_and(|s| s <= l.max_segments));
        }
        ReplyPlan::ReplyChunk { .. } => {}
    }
    check_split(&reply.chunk_regions(&rcv), &l, reply.mrs());

    // The call: its header and inline part fit the send threshold, its
    // chunk splits as planned.
    assert_eq!(snd.parts_len(), Some(snd.len));
    let hdr = call_header_len(call.read_segments(), reply.write_chunk_segments(), reply.reply_chunk_segments());
    assert!(u64::from(hdr) + u64::from(call.inline_len(&snd)) <= u64::from(l.inline_send));
    if let CallPlan::ReadChunk { position, len, tail_skip, tail_len, .. } = call {
        assert_eq!((position, len), (snd.head.len, snd.page_len));
        assert_eq!(tail_skip + tail_len, snd.tail.len);
        assert!(tail_skip < 4);
    }
    check_split(&call.chunk_regions(&snd), &l, call.read_segments());
});
