// SPDX-License-Identifier: GPL-2.0
//! RDMA-CM private data for RPC-over-RDMA version 1 (RFC 8797).
//!
//! Both peers put an 8-octet message in the private data of the connection
//! request and reply (network byte order):
//!
//! ```text
//! octets 0..4  format identifier 0xf6ab0e18
//! octet  4     version (1)
//! octet  5     flags: bit 0 (least significant) = R, the sender can handle
//!              Send With Invalidate; bits 1..7 reserved (sent as zero,
//!              ignored on receipt)
//! octet  6     send size:    bytes / 1024 - 1
//! octet  7     receive size: bytes / 1024 - 1
//! ```
//!
//! Sizes therefore range over 1 KiB ..= 256 KiB in 1 KiB steps. A peer that
//! sends no recognisable message is treated as R = 0 with 1024-byte sizes
//! ([`PrivateData::DEFAULT`]).
//!
//! RFC 8797 section 5.2 says other layers may put their own data in front of
//! this message and "the offset of the Format Identifier is not restricted to
//! any alignment", so [`PrivateData::find`] searches every byte offset.

/// The format identifier that starts the message.
pub const FORMAT_ID: u32 = 0xf6ab_0e18;
/// The message format version this module implements.
pub const VERSION: u8 = 1;
/// Length of a version 1 message in octets.
pub const MESSAGE_LEN: usize = 8;
/// The R bit in the flags octet: the sender can handle Send With Invalidate.
pub const FLAG_REMOTE_INVALIDATE: u8 = 0x01;
/// Smallest size the size fields can carry (encoded as 0); also the
/// RPC-over-RDMA version 1 minimum inline threshold.
pub const MIN_INLINE_SIZE: u32 = 1024;
/// Largest size the size fields can carry (encoded as 255).
pub const MAX_INLINE_SIZE: u32 = 262_144;
/// Inline threshold assumed in both directions when the peer sent no message.
pub const DEFAULT_INLINE_SIZE: u32 = 1024;

/// Why a buffer does not hold a version 1 message at offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// Fewer than [`MESSAGE_LEN`] octets.
    Truncated {
        /// Octets available.
        len: usize,
    },
    /// The first four octets are not [`FORMAT_ID`].
    BadFormatId(u32),
    /// The identifier matched but the version is not 1.
    UnsupportedVersion(u8),
    /// The output buffer is shorter than [`MESSAGE_LEN`].
    NoSpace,
}

/// Encodes a size in bytes for the send/receive size fields.
///
/// Rounds down to a multiple of 1024, so a peer is never told more than the
/// buffer holds; values below 1024 encode as 1024 (the protocol minimum, which
/// every version 1 peer must accept anyway) and values above 256 KiB as 256 KiB.
pub const fn encode_size(bytes: u32) -> u8 {
    let kib = bytes / 1024;
    if kib == 0 {
        0
    } else if kib > 256 {
        255
    } else {
        (kib - 1) as u8
    }
}

/// Decodes a size field to bytes: `(code + 1) * 1024`.
pub const fn decode_size(code: u8) -> u32 {
    (code as u32 + 1) * 1024
}

/// The size a peer will see after encoding: `decode_size(encode_size(bytes))`.
pub const fn normalize_size(bytes: u32) -> u32 {
    decode_size(encode_size(bytes))
}

/// The contents of a version 1 message, sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    /// R: the sender can handle (receive) Send With Invalidate.
    pub remote_invalidate: bool,
    /// Most bytes the sender will transmit in one RDMA Send.
    pub send_size: u32,
    /// Most bytes the sender can receive in one RDMA Receive.
    pub recv_size: u32,
}

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData::DEFAULT
    }
}

impl PrivateData {
    /// What to assume of a peer that sent no valid message: R = 0, 1024 bytes both ways.
    pub const DEFAULT: PrivateData =
        PrivateData { remote_invalidate: false, send_size: DEFAULT_INLINE_SIZE, recv_size: DEFAULT_INLINE_SIZE };

    /// A message advertising the given sizes, normalized with
    /// [`normalize_size`] so that the value equals what the peer decodes.
    pub const fn new(send_size: u32, recv_size: u32, remote_invalidate: bool) -> PrivateData {
        PrivateData { remote_invalidate, send_size: normalize_size(send_size), recv_size: normalize_size(recv_size) }
    }

    /// The 8-octet wire form (reserved bits zero; sizes as by [`encode_size`]).
    pub const fn to_bytes(self) -> [u8; MESSAGE_LEN] {
        let id = FORMAT_ID.to_be_bytes();
        let flags = if self.remote_invalidate { FLAG_REMOTE_INVALIDATE } else { 0 };
        [id[0], id[1], id[2], id[3], VERSION, flags, encode_size(self.send_size), encode_size(self.recv_size)]
    }

    /// Writes the wire form to the start of `buf`, returning [`MESSAGE_LEN`].
    pub fn encode(self, buf: &mut [u8]) -> Result<usize, CmError> {
        let out = buf.first_chunk_mut::<MESSAGE_LEN>().ok_or(CmError::NoSpace)?;
        *out = self.to_bytes();
        Ok(MESSAGE_LEN)
    }

    /// Decodes a message that starts at offset 0 of `buf`. Octets after the
    /// first eight are ignored (transports pad private data).
    pub fn decode(buf: &[u8]) -> Result<PrivateData, CmError> {
        let Some(&[a, b, c, d, version, flags, send, recv]) = buf.first_chunk::<MESSAGE_LEN>() else {
            return Err(CmError::Truncated { len: buf.len() });
        };
        let id = u32::from_be_bytes([a, b, c, d]);
        if id != FORMAT_ID {
            return Err(CmError::BadFormatId(id));
        }
        if version != VERSION {
            return Err(CmError::UnsupportedVersion(version));
        }
        Ok(PrivateData {
            remote_invalidate: flags & FLAG_REMOTE_INVALIDATE != 0,
            send_size: decode_size(send),
            recv_size: decode_size(recv),
        })
    }

    /// Searches received private data for a version 1 message.
    ///
    /// The format identifier may start at any byte offset. An occurrence whose
    /// version is not 1, or that is too close to the end of `buf` to hold all
    /// eight octets, is skipped (RFC 8797 asks receivers to check both), and
    /// the search goes on; the first valid occurrence wins. `None` means the
    /// peer is to be treated as sending [`PrivateData::DEFAULT`].
    pub fn find(buf: &[u8]) -> Option<PrivateData> {
        let id = FORMAT_ID.to_be_bytes();
        buf.windows(id.len())
            .enumerate()
            .filter(|(_, w)| *w == id)
            .find_map(|(i, _)| PrivateData::decode(buf.get(i..)?).ok())
    }

    /// [`PrivateData::find`], or [`PrivateData::DEFAULT`] if nothing is found.
    pub fn find_or_default(buf: &[u8]) -> PrivateData {
        PrivateData::find(buf).unwrap_or(PrivateData::DEFAULT)
    }
}

/// The connection parameters that follow from the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Largest message this side may Send (the client's call threshold, the
    /// server's reply threshold): min(own send size, peer's receive size).
    pub send_threshold: u32,
    /// Largest message this side should expect to Receive: min(own receive
    /// size, peer's send size).
    pub recv_threshold: u32,
    /// True if both sides set R: the responder may reply with Send With
    /// Invalidate.
    pub remote_invalidate: bool,
}

impl Negotiated {
    /// What holds before (or without) any exchange: the 1 KiB thresholds
    /// every Version One peer supports, and no remote invalidation. The
    /// same as [`negotiate`] of the minimum sizes with no peer message.
    pub const BEFORE_EXCHANGE: Negotiated = Negotiated {
        send_threshold: DEFAULT_INLINE_SIZE,
        recv_threshold: DEFAULT_INLINE_SIZE,
        remote_invalidate: false,
    };
}

/// Computes the inline thresholds and remote invalidation from this side's
/// own capabilities and the peer's message (`None` if it sent none, in which
/// case [`PrivateData::DEFAULT`] applies).
///
/// `local_send`/`local_recv` are this side's real buffer sizes in bytes and
/// are used as given, not rounded; they should be at least
/// [`MIN_INLINE_SIZE`], which version 1 requires of every peer.
pub fn negotiate(local_send: u32, local_recv: u32, local_remote_invalidate: bool, peer: Option<&PrivateData>) -> Negotiated {
    let peer = peer.copied().unwrap_or(PrivateData::DEFAULT);
    Negotiated {
        send_threshold: local_send.min(peer.recv_size),
        recv_threshold: local_recv.min(peer.send_size),
        remote_invalidate: local_remote_invalidate && peer.remote_invalidate,
    }
}

/// The InfiniBand CM's reject reason "stale connection" (IBTA reason 10,
/// `IB_CM_REJ_STALE_CONN`): the peer still holds a connection from the
/// requester's queue pair number (its side of an earlier connection has
/// not yet timed out, or a new queue pair got an old one's number).
pub const REJ_STALE_CONN: i32 = 10;

/// What a rejected connection request means to the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The peer refuses: no listener, or it turned the request down.
    Refused,
    /// The peer still holds an older connection of ours: a condition that
    /// passes (the next attempt comes from a new queue pair), so a reason
    /// to try again, not a refusal.
    Stale,
}

/// Classifies a connection rejection by the status rdma_cm reports with
/// it (for InfiniBand and RoCE the CM's reject reason; iWARP reports a
/// negative errno, never a stale connection).
pub fn rejection(status: i32) -> Rejection {
    if status == REJ_STALE_CONN {
        Rejection::Stale
    } else {
        Rejection::Refused
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::testutil::Rng;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn stale_connection_is_not_a_refusal() {
        assert_eq!(rejection(REJ_STALE_CONN), Rejection::Stale);
        assert_eq!(rejection(10), Rejection::Stale);
        // Consumer-defined reject (28), invalid service ID (8), timeout
        // (1), and iWARP's -ECONNREFUSED: refusals.
        for s in [28, 8, 1, 0, -111, i32::MIN, i32::MAX] {
            assert_eq!(rejection(s), Rejection::Refused, "status {s}");
        }
    }

    /// R set, send size 8 KiB (code 7), receive size 16 KiB (code 15).
    const MSG_R: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x07, 0x0f];
    /// R clear, both sizes 1 KiB (code 0): the same as no message at all.
    const MSG_MIN: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0x00];
    /// R clear, send 256 KiB (code 255), receive 4 KiB (code 3).
    const MSG_MAX: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0xff, 0x03];

    #[test]
    fn before_exchange_is_negotiating_the_minimum_with_nobody() {
        assert_eq!(negotiate(DEFAULT_INLINE_SIZE, DEFAULT_INLINE_SIZE, false, None), Negotiated::BEFORE_EXCHANGE);
        assert_eq!(negotiate(DEFAULT_INLINE_SIZE, DEFAULT_INLINE_SIZE, true, None), Negotiated::BEFORE_EXCHANGE);
    }

    #[test]
    fn vectors_decode_and_encode() {
        let r = PrivateData::decode(&MSG_R).unwrap();
        assert_eq!(r, PrivateData { remote_invalidate: true, send_size: 8192, recv_size: 16384 });
        assert_eq!(r.to_bytes(), MSG_R);
        assert_eq!(PrivateData::new(8192, 16384, true), r);

        let min = PrivateData::decode(&MSG_MIN).unwrap();
        assert_eq!(min, PrivateData::DEFAULT);
        assert_eq!(PrivateData::default().to_bytes(), MSG_MIN);

        let max = PrivateData::decode(&MSG_MAX).unwrap();
        assert_eq!(max, PrivateData { remote_invalidate: false, send_size: 262_144, recv_size: 4096 });
        assert_eq!(max.to_bytes(), MSG_MAX);

        let mut buf = [0xaau8; 10];
        assert_eq!(r.encode(&mut buf), Ok(8));
        assert_eq!(&buf[..8], &MSG_R);
        assert_eq!(&buf[8..], &[0xaa, 0xaa]);
        assert_eq!(r.encode(&mut [0u8; 7]), Err(CmError::NoSpace));
    }

    #[test]
    fn reserved_bits_are_ignored_and_sent_as_zero() {
        let mut m = MSG_R;
        m[5] = 0xfe;
        let d = PrivateData::decode(&m).unwrap();
        assert!(!d.remote_invalidate);
        assert_eq!(d.to_bytes()[5], 0);
        m[5] = 0xff;
        let d = PrivateData::decode(&m).unwrap();
        assert!(d.remote_invalidate);
        assert_eq!(d.to_bytes(), MSG_R);
    }

    #[test]
    fn truncation_and_bad_fields_are_typed() {
        for cut in 0..MESSAGE_LEN {
            assert_eq!(PrivateData::decode(&MSG_R[..cut]), Err(CmError::Truncated { len: cut }));
            assert_eq!(PrivateData::find(&MSG_R[..cut]), None);
        }
        let mut bad = MSG_R;
        bad[3] = 0x19;
        assert_eq!(PrivateData::decode(&bad), Err(CmError::BadFormatId(0xf6ab_0e19)));
        assert_eq!(PrivateData::find(&bad), None);
        for v in [0u8, 2, 0xff] {
            let mut m = MSG_R;
            m[4] = v;
            assert_eq!(PrivateData::decode(&m), Err(CmError::UnsupportedVersion(v)));
            assert_eq!(PrivateData::find(&m), None);
            assert_eq!(PrivateData::find_or_default(&m), PrivateData::DEFAULT);
        }
        // Trailing padding is fine.
        let mut padded = [0u8; 56];
        padded[..8].copy_from_slice(&MSG_R);
        assert_eq!(PrivateData::decode(&padded), PrivateData::decode(&MSG_R));
    }

    #[test]
    fn find_at_any_byte_offset() {
        for off in 0..=24 {
            let mut buf = [0x5au8; 32];
            buf[off..off + 8].copy_from_slice(&MSG_MAX);
            assert_eq!(PrivateData::find(&buf), Some(PrivateData::decode(&MSG_MAX).unwrap()), "offset {off}");
            // Cut so the message no longer fits: treated as absent.
            assert_eq!(PrivateData::find(&buf[..off + 7]), None);
        }
        assert_eq!(PrivateData::find(&[]), None);
        assert_eq!(PrivateData::find_or_default(&[0u8; 56]), PrivateData::DEFAULT);
    }

    #[test]
    fn find_skips_invalid_occurrences() {
        // Identifier followed by a bad version, then a valid message at offset 11.
        let mut buf = [0u8; 24];
        buf[1..5].copy_from_slice(&FORMAT_ID.to_be_bytes());
        buf[5] = 2;
        buf[11..19].copy_from_slice(&MSG_R);
        assert_eq!(PrivateData::find(&buf), Some(PrivateData::decode(&MSG_R).unwrap()));
        // Overlapping identifiers: the first's "version" is the second's 0xf6.
        let mut buf = [0u8; 12];
        buf[..4].copy_from_slice(&FORMAT_ID.to_be_bytes());
        buf[4..].copy_from_slice(&MSG_MIN);
        assert_eq!(PrivateData::find(&buf), Some(PrivateData::DEFAULT));
        // The first valid occurrence wins.
        let mut two = [0u8; 16];
        two[..8].copy_from_slice(&MSG_MAX);
        two[8..].copy_from_slice(&MSG_R);
        assert_eq!(PrivateData::find(&two), PrivateData::decode(&MSG_MAX).ok());
    }

    #[test]
    fn size_encoding() {
        let cases = [
            (0u32, 0u8),
            (1, 0),
            (1023, 0),
            (1024, 0),
            (2047, 0),
            (2048, 1),
            (4096, 3),
            (8191, 6),
            (262_143, 254),
            (262_144, 255),
            (262_145, 255),
            (1 << 20, 255),
            (u32::MAX, 255),
        ];
        for (bytes, code) in cases {
            assert_eq!(encode_size(bytes), code, "{bytes}");
        }
        for code in 0..=255u8 {
            let bytes = decode_size(code);
            assert_eq!(bytes, (u32::from(code) + 1) * 1024);
            assert_eq!(encode_size(bytes), code);
            assert_eq!(normalize_size(bytes), bytes);
        }
        assert_eq!(decode_size(0), MIN_INLINE_SIZE);
        assert_eq!(decode_size(255), MAX_INLINE_SIZE);
        assert_eq!(normalize_size(5000), 4096);
        assert_eq!(normalize_size(100), 1024);
        assert_eq!(PrivateData::new(5000, 1 << 30, false), PrivateData { remote_invalidate: false, send_size: 4096, recv_size: 262_144 });
    }

    #[test]
    fn negotiation() {
        // No peer message: 1024 both ways, no remote invalidation.
        assert_eq!(
            negotiate(4096, 4096, true, None),
            Negotiated { send_threshold: 1024, recv_threshold: 1024, remote_invalidate: false }
        );
        let peer = PrivateData::decode(&MSG_R).unwrap(); // send 8 KiB, recv 16 KiB, R
        assert_eq!(
            negotiate(32768, 4096, true, Some(&peer)),
            Negotiated { send_threshold: 16384, recv_threshold: 4096, remote_invalidate: true }
        );
        assert_eq!(
            negotiate(4096, 65536, false, Some(&peer)),
            Negotiated { send_threshold: 4096, recv_threshold: 8192, remote_invalidate: false }
        );
        // Both client and server views of one exchange agree.
        let client = PrivateData::new(4096, 8192, true);
        let server = PrivateData::new(16384, 2048, false);
        let c = negotiate(4096, 8192, true, PrivateData::decode(&server.to_bytes()).ok().as_ref());
        let s = negotiate(16384, 2048, false, PrivateData::decode(&client.to_bytes()).ok().as_ref());
        assert_eq!(c, Negotiated { send_threshold: 2048, recv_threshold: 8192, remote_invalidate: false });
        assert_eq!(s, Negotiated { send_threshold: 8192, recv_threshold: 2048, remote_invalidate: false });
        assert_eq!(c.send_threshold, s.recv_threshold);
        assert_eq!(s.send_threshold, c.recv_threshold);
    }

    #[test]
    fn mutation_fuzz_never_panics() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut found = 0u32;
        for _ in 0..20_000 {
            let len = rng.below(40) as usize;
            let mut buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if len >= 4 && rng.below(2) == 0 {
                let at = (rng.next() as usize) % (len - 3);
                buf[at..at + 4].copy_from_slice(&FORMAT_ID.to_be_bytes());
                if at + 4 < len && rng.below(2) == 0 {
                    buf[at + 4] = VERSION;
                }
            }
            let _ = PrivateData::decode(&buf);
            if let Some(d) = PrivateData::find(&buf) {
                found += 1;
                assert_eq!(PrivateData::decode(&d.to_bytes()), Ok(d));
                let n = negotiate(9000, 3000, true, Some(&d));
                assert!(n.send_threshold <= d.recv_size && n.send_threshold <= 9000);
                assert!(n.recv_threshold <= d.send_size && n.recv_threshold <= 3000);
            }
        }
        assert!(found > 1000, "only {found} found");
    }
}
