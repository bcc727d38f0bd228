// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the RFC 8797 CM private data parser.
//!
//! Any input must parse without panicking; a message that is found must
//! re-encode and decode to the same value, and negotiation with it must never
//! exceed either side's sizes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::cm::{self, PrivateData};

fuzz_target!(|data: &[u8]| {
    let at_zero = PrivateData::decode(data);
    let found = PrivateData::find(data);
    if let Ok(d) = at_zero {
        // A valid message at offset 0 is the first valid occurrence.
        assert_eq!(found, Some(d));
    }
    let Some(d) = found else { return };
    let bytes = d.to_bytes();
    assert_eq!(PrivateData::decode(&bytes), Ok(d));
    assert_eq!(PrivateData::find(&bytes), Some(d));
    assert!((cm::MIN_INLINE_SIZE..=cm::MAX_INLINE_SIZE).contains(&d.send_size));
    assert!((cm::MIN_INLINE_SIZE..=cm::MAX_INLINE_SIZE).contains(&d.recv_size));

    // Local sizes taken from the input tail, so negotiation sees varied values.
    let tail = |i: usize| data.iter().rev().nth(i).copied().map_or(0, u32::from);
    let local_send = (tail(0) << 12) | (tail(1) << 4);
    let local_recv = (tail(2) << 12) | (tail(3) << 4);
    let local_r = tail(4) & 1 == 1;
    let n = cm::negotiate(local_send, local_recv, local_r, Some(&d));
    assert_eq!(n.send_threshold, local_send.min(d.recv_size));
    assert_eq!(n.recv_threshold, local_recv.min(d.send_size));
    assert_eq!(n.remote_invalidate, local_r && d.remote_invalidate);
});
