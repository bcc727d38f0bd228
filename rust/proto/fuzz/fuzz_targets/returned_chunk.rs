// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the check of a Write or Reply chunk a responder returns
//! (`v1::check_returned_chunk`).
//!
//! The input is an offered chunk (its first byte gives the segment count,
//! then 16 bytes a segment) followed by a Version One reply header whose
//! Reply chunk is the returned one. Whatever is accepted must be a chunk a
//! responder could have filled: at most the offered segments, each at its
//! offered place, no longer than offered, and the accepted total must be a
//! prefix of the offered bytes made of written bytes only.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::v1::{self, Header, Limits, Segment};

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n % 9);
    let Some((offer_bytes, msg)) = rest.split_at_checked(n * 16) else { return };
    let offered: Vec<Segment> = (0..n)
        .map(|i| {
            let b = &offer_bytes[i * 16..];
            // Short offered lengths keep the written-byte model small.
            Segment { handle: u32_at(b, 0), length: u32_at(b, 4) % 4096, offset: u64::from(u32_at(b, 8)) << 32 | u64::from(u32_at(b, 12)) }
        })
        .collect();
    let Ok(h) = Header::decode(msg, &Limits::UNBOUNDED) else { return };
    let Some(returned) = h.body.chunks().and_then(|c| c.reply) else { return };
    let Ok(total) = v1::check_returned_chunk(&offered, &returned) else { return };
    assert!(returned.len() <= offered.len());
    let mut written = Vec::new();
    let mut sum = 0u64;
    for (i, got) in returned.iter().enumerate() {
        let want = offered[i];
        assert_eq!((got.handle, got.offset), (want.handle, want.offset));
        assert!(got.length <= want.length);
        sum += u64::from(got.length);
        written.extend((0..want.length).map(|b| b < got.length));
    }
    assert_eq!(total, sum);
    assert!(total as usize <= written.len());
    assert!(written[..total as usize].iter().all(|w| *w), "an unwritten byte inside the accepted result");
});
