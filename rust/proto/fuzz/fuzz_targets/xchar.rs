// SPDX-License-Identifier: GPL-2.0
//! Fuzzes the transport characteristics extension decoders: `rdma_optinfo`
//! of every operation (first byte picks the `rdma_opttype`) and whole
//! `RDMA2_OPTIONAL` messages. A successful decode must re-encode and decode to
//! the same value, and merging it must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_proto::v2::{Body, Direction, Header};
use rpcrdma_proto::xchar::{respond_to_request, Characteristics, Disposition, XchOp, Xchar, XcharSpec, MIN_RBSIZ};

fn check(op: &XchOp<'_>) {
    let n = op.encoded_len();
    let mut out = vec![0u8; n];
    assert_eq!(op.encode(&mut out), Ok(n));
    let again = XchOp::decode(op.opttype(), &out).expect("re-encoded optinfo must decode");
    assert_eq!(&again, op);
    let mut out2 = vec![0u8; n];
    assert_eq!(again.encode(&mut out2), Ok(n));
    assert_eq!(out, out2);

    let mut msg = vec![0u8; n + 28];
    assert_eq!(op.encode_message(7, 1, Direction::Reply, &mut msg), Ok(n + 28));
    let (h, rest) = Header::decode_with(&msg, &rpcrdma_proto::v2::Limits::UNLIMITED).expect("message must decode");
    assert!(rest.is_empty());
    let Body::Optional(opt) = h.body else { panic!("not OPTIONAL") };
    assert_eq!(XchOp::from_optional(&opt).as_ref(), Ok(op));

    let ours = [Xchar::RecvBufSize(1 << 20), Xchar::ReqRemInv(true), Xchar::Other { id: 99, data: b"x" }];
    let mut peer = Characteristics::default();
    let _ = peer.merge(op, Some(&XcharSpec::from_slice(&ours)));
    assert!(peer.rbsiz >= MIN_RBSIZ);
    if let XchOp::ReqXch { want } = op {
        let (mut d, mut r, mut p) = ([0u32; 8], [0u32; 8], [0u32; 8]);
        let words = respond_to_request(want, |_| Disposition::Pending, &mut d, &mut r, &mut p).expect("fits");
        assert_eq!(words, want.len().div_ceil(32));
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some((&sel, optinfo)) = data.split_first() {
        if let Ok(op) = XchOp::decode(u32::from(sel % 6), optinfo) {
            check(&op);
        }
    }
    if let Ok((Header { body: Body::Optional(opt), .. }, _)) = Header::decode(data) {
        if let Ok(op) = XchOp::from_optional(&opt) {
            check(&op);
        }
    }
});
