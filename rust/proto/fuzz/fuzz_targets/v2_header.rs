// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the RPC-over-RDMA Version Two header decoder and the version
//! negotiation classifier: decoding arbitrary bytes must never panic, and a
//! successful decode must re-encode to a header of the same length that
//! decodes to the same value. A backward reply a responder finds in them
//! (either version) is a suffix of them, an RPC REPLY with its XID.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::responder::backward_reply;
use rpcrdma_proto::v1::peek;
use rpcrdma_proto::v2::{probe_reply, Body, Decision, Header, Limits, Negotiation, ProtocolVersion};

fn check(data: &[u8], limits: &Limits) {
    let Ok((hdr, rest)) = Header::decode_with(data, limits) else { return };
    let hlen = data.len() - rest.len();
    assert_eq!(hdr.encoded_len(), hlen);
    let mut out = vec![0u8; hlen];
    assert_eq!(hdr.encode(&mut out), Ok(hlen));
    let (again, rest2) = Header::decode_with(&out, limits).expect("re-encoded header must decode");
    assert!(rest2.is_empty());
    assert_eq!(again, hdr);
    // Everything but opaque padding is canonical.
    if !matches!(hdr.body, Body::Optional(_)) {
        assert_eq!(&out[..], &data[..hlen]);
    }
    if hlen > 0 {
        assert!(hdr.encode(&mut out[..hlen - 1]).is_err());
    }
}

fuzz_target!(|data: &[u8]| {
    check(data, &Limits::DEFAULT);
    check(data, &Limits::UNLIMITED);

    if let Ok(p) = peek(data) {
        let _ = ProtocolVersion::of(&p);
        let d = probe_reply(p.xid, data);
        if let Decision::UseV2 { credit } = d {
            assert_eq!(credit, p.credits);
        }
        let mut n = Negotiation::start(p.xid);
        assert_eq!(n.on_reply(data), d);
        let _ = (n.version(), n.inline_threshold(), n.next_connection_version());
    }
    let _ = probe_reply(0, data);
    for vers in [1, 2] {
        if let Some(r) = backward_reply(data, vers) {
            assert!(data.ends_with(r.reply));
            assert_eq!(r.reply.get(..4), Some(&r.xid.to_be_bytes()[..]));
            assert_eq!(r.reply.get(4..8), Some(&[0u8, 0, 0, 1][..]));
        }
    }
});
