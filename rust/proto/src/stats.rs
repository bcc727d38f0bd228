// SPDX-License-Identifier: GPL-2.0
//! The transport line of `/proc/self/mountstats`.
//!
//! The in-tree client prints, from `xprt_rdma_print_stats()`, exactly:
//!
//! ```text
//! "\txprt:\trdma " then 27 decimal fields separated by single spaces, then "\n"
//! ```
//!
//! i.e. a tab, `xprt:`, a tab, `rdma`, a space, the fields, no trailing
//! space, one newline. Every field is a plain decimal number with no
//! padding; only the idle time (field 5, `%ld`) can be negative. In order:
//!
//! | # | field | source |
//! |---|---|---|
//! | 1 | local port | always `0` |
//! | 2 | bind_count | `xprt->stat` |
//! | 3 | connect_count | `xprt->stat` |
//! | 4 | connect_time | `xprt->stat.connect_time / HZ` (seconds) |
//! | 5 | idle_time | `(jiffies - xprt->last_used) / HZ` when connected, else 0 |
//! | 6 | sends | `xprt->stat` |
//! | 7 | recvs | `xprt->stat` |
//! | 8 | bad_xids | `xprt->stat` |
//! | 9 | req_u | `xprt->stat` |
//! | 10 | bklog_u | `xprt->stat` |
//! | 11 | read_chunk_count | transport |
//! | 12 | write_chunk_count | transport |
//! | 13 | reply_chunk_count | transport |
//! | 14 | total_rdma_request | transport |
//! | 15 | total_rdma_reply | transport |
//! | 16 | pullup_copy_count | transport |
//! | 17 | fixup_copy_count | transport |
//! | 18 | hardway_register_count | transport |
//! | 19 | failed_marshal_count | transport |
//! | 20 | bad_reply_count | transport |
//! | 21 | nomsg_call_count | transport |
//! | 22 | mrs_recycled | transport |
//! | 23 | mrs_orphaned | transport |
//! | 24 | mrs_allocated | transport |
//! | 25 | local_inv_needed | transport |
//! | 26 | empty_sendctx_q | transport |
//! | 27 | (was reply_waits_for_send) | always `0` |
//!
//! The kernel formats into a stack buffer ([`LineBuf`] of
//! [`MOUNTSTATS_MAX_LEN`] bytes always suffices) and hands it to
//! `seq_puts()`.

use core::fmt::{self, Write};

use super::plan::{CallPlan, ReplyPlan, XdrBufDesc, WRITE_PAD_LEN};

/// What the line starts with: tab, `xprt:`, tab, `rdma`, space.
pub const MOUNTSTATS_PREFIX: &str = "\txprt:\trdma ";

/// Longest possible line: the prefix, 24 `u64` fields of up to 20 digits,
/// the idle time of up to 20 characters (`i64::MIN`), the two constant
/// zeros, 26 separating spaces and the newline.
pub const MOUNTSTATS_MAX_LEN: usize = MOUNTSTATS_PREFIX.len() + 24 * 20 + 20 + 2 + 26 + 1;

/// The counters behind the line, in printing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Field 2: `xprt->stat.bind_count`.
    pub bind_count: u64,
    /// Field 3: `xprt->stat.connect_count`.
    pub connect_count: u64,
    /// Field 4: connected time in seconds (see [`jiffies_to_secs`]).
    pub connect_time: u64,
    /// Field 5: idle time in seconds (see [`idle_time_secs`]); signed like
    /// the C `long` it mirrors.
    pub idle_time: i64,
    /// Field 6: `xprt->stat.sends`.
    pub sends: u64,
    /// Field 7: `xprt->stat.recvs`.
    pub recvs: u64,
    /// Field 8: `xprt->stat.bad_xids`.
    pub bad_xids: u64,
    /// Field 9: `xprt->stat.req_u`.
    pub req_u: u64,
    /// Field 10: `xprt->stat.bklog_u`.
    pub bklog_u: u64,
    /// Field 11: Read chunk segments registered.
    pub read_chunk_count: u64,
    /// Field 12: Write chunk segments registered (including pad segments).
    pub write_chunk_count: u64,
    /// Field 13: Reply chunk segments registered.
    pub reply_chunk_count: u64,
    /// Field 14: bytes registered for the peer to RDMA Write into.
    pub total_rdma_request: u64,
    /// Field 15: bytes the peer RDMA-Wrote into Write and Reply chunks.
    pub total_rdma_reply: u64,
    /// Field 16: bytes copied by Send pull-up.
    pub pullup_copy_count: u64,
    /// Field 17: bytes copied while fixing up inline Replies.
    pub fixup_copy_count: u64,
    /// Field 18: registrations done the slow way.
    pub hardway_register_count: u64,
    /// Field 19: Calls that failed to marshal.
    pub failed_marshal_count: u64,
    /// Field 20: Replies with an invalid transport header.
    pub bad_reply_count: u64,
    /// Field 21: Long Calls (RDMA_NOMSG) sent.
    pub nomsg_call_count: u64,
    /// Field 22: MRs recycled after a failure.
    pub mrs_recycled: u64,
    /// Field 23: MRs orphaned (leaked after a failure).
    pub mrs_orphaned: u64,
    /// Field 24: MRs allocated.
    pub mrs_allocated: u64,
    /// Field 25: LOCAL_INV WRs that had to be posted.
    pub local_inv_needed: u64,
    /// Field 26: times the Send context queue was empty.
    pub empty_sendctx_q: u64,
}

/// One field of [`MarshalCounts`], as [`MarshalCounts::count`] hands it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarshalCounter {
    /// [`MarshalCounts::read_segments`].
    ReadSegments,
    /// [`MarshalCounts::write_segments`].
    WriteSegments,
    /// [`MarshalCounts::reply_segments`].
    ReplySegments,
    /// [`MarshalCounts::rdma_request_bytes`].
    RdmaRequestBytes,
    /// [`MarshalCounts::pullup_bytes`].
    PullupBytes,
    /// [`MarshalCounts::nomsg_calls`].
    NomsgCalls,
}

/// What one marshalled RPC adds to the counters, the way the in-tree client
/// counts: one Read/Write/Reply chunk count per segment (the Write pad
/// segment included), the bytes offered for RDMA Write in
/// `total_rdma_request` (chunk length, plus the pad), a Long Call in
/// `nomsg_call_count`, and for a pulled-up inline Call the page list and
/// tail bytes copied in `pullup_copy_count` (the head is assumed to be in
/// the send buffer already).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MarshalCounts {
    /// Read chunk segments.
    pub read_segments: u64,
    /// Write chunk segments, the pad segment included.
    pub write_segments: u64,
    /// Reply chunk segments.
    pub reply_segments: u64,
    /// Bytes offered for the server to RDMA Write into.
    pub rdma_request_bytes: u64,
    /// Bytes copied past the head of a pulled-up inline Call.
    pub pullup_bytes: u64,
    /// 1 for a Long Call (RDMA_NOMSG), else 0.
    pub nomsg_calls: u64,
}

impl MarshalCounts {
    /// The counts for an RPC marshalled as `call` and `reply` say, `snd`
    /// being its Call. Inlined: the caller adds only the counts that are
    /// not zero, which the inlined body tells without a returned struct.
    #[inline(always)]
    pub fn of(call: &CallPlan, reply: &ReplyPlan, snd: &XdrBufDesc) -> MarshalCounts {
        let mut c = MarshalCounts { read_segments: u64::from(call.read_segments()), ..MarshalCounts::default() };
        match *call {
            CallPlan::LongCall { .. } => c.nomsg_calls = 1,
            CallPlan::Inline { pullup: true } => c.pullup_bytes = Self::pulled_up(snd),
            _ => {}
        }
        match *reply {
            ReplyPlan::Inline => {}
            ReplyPlan::WriteChunk { len, pad_segment, .. } => {
                c.write_segments = u64::from(reply.write_chunk_segments().unwrap_or(0));
                // Two `u32`s: their sum cannot wrap a `u64`.
                let pad = if pad_segment { u64::from(WRITE_PAD_LEN) } else { 0 };
                c.rdma_request_bytes = u64::from(len).wrapping_add(pad);
            }
            ReplyPlan::ReplyChunk { len, segments } => {
                c.reply_segments = u64::from(segments);
                c.rdma_request_bytes = u64::from(len);
            }
        }
        c
    }

    /// Hands `add` the counters the RPC marshalled as `call` and `reply`
    /// (`snd` being its Call) moves, each at most once, with the amount
    /// [`MarshalCounts::of`] gives it (zero amounts may be handed too; a
    /// counter not handed stays as it is). The usual shapes are counted
    /// directly: an inline Call copied whole with an inline Reply (GETATTR),
    /// the same Call with the Reply's pages in one Write segment and no pad
    /// (READ), one Read segment with an inline Reply (WRITE). Inlined into
    /// the caller, each of them is a few adds of constants there, where a
    /// built [`MarshalCounts`] would be tested field by field.
    #[inline(always)]
    pub fn count(call: &CallPlan, reply: &ReplyPlan, snd: &XdrBufDesc, mut add: impl FnMut(MarshalCounter, u64)) {
        match (*call, *reply) {
            (CallPlan::Inline { pullup: true }, ReplyPlan::Inline) => {
                add(MarshalCounter::PullupBytes, Self::pulled_up(snd));
            }
            (CallPlan::Inline { pullup: true }, ReplyPlan::WriteChunk { len, segments: 1, pad_segment: false }) => {
                add(MarshalCounter::WriteSegments, 1);
                add(MarshalCounter::RdmaRequestBytes, u64::from(len));
                add(MarshalCounter::PullupBytes, Self::pulled_up(snd));
            }
            (CallPlan::ReadChunk { segments: 1, .. }, ReplyPlan::Inline) => add(MarshalCounter::ReadSegments, 1),
            _ => {
                let n = Self::of(call, reply, snd);
                add(MarshalCounter::ReadSegments, n.read_segments);
                add(MarshalCounter::WriteSegments, n.write_segments);
                add(MarshalCounter::ReplySegments, n.reply_segments);
                add(MarshalCounter::RdmaRequestBytes, n.rdma_request_bytes);
                add(MarshalCounter::PullupBytes, n.pullup_bytes);
                add(MarshalCounter::NomsgCalls, n.nomsg_calls);
            }
        }
    }

    /// The bytes past the head that pulling up the Call `snd` copies (its
    /// [`MarshalCounts::pullup_bytes`]).
    #[inline]
    pub fn pulled_up(snd: &XdrBufDesc) -> u64 {
        // Two `u32`s: their sum cannot wrap a `u64`.
        u64::from(snd.page_len).wrapping_add(u64::from(snd.tail.len))
    }
}

/// Writes the whole mountstats transport line, newline included.
pub fn write_mountstats<W: Write + ?Sized>(w: &mut W, c: &Counters) -> fmt::Result {
    w.write_str(MOUNTSTATS_PREFIX)?;
    write!(
        w,
        "0 {} {} {} {} {} {} {} {} {} ",
        c.bind_count, c.connect_count, c.connect_time, c.idle_time, c.sends, c.recvs, c.bad_xids, c.req_u, c.bklog_u
    )?;
    write!(
        w,
        "{} {} {} {} {} {} {} {} {} {} {} ",
        c.read_chunk_count,
        c.write_chunk_count,
        c.reply_chunk_count,
        c.total_rdma_request,
        c.total_rdma_reply,
        c.pullup_copy_count,
        c.fixup_copy_count,
        c.hardway_register_count,
        c.failed_marshal_count,
        c.bad_reply_count,
        c.nomsg_call_count
    )?;
    writeln!(
        w,
        "{} {} {} {} {} 0",
        c.mrs_recycled, c.mrs_orphaned, c.mrs_allocated, c.local_inv_needed, c.empty_sendctx_q
    )
}

/// Whole seconds in `jiffies` at `hz` ticks per second (0 if `hz` is 0).
pub fn jiffies_to_secs(jiffies: u64, hz: u64) -> u64 {
    jiffies.checked_div(hz).unwrap_or(0)
}

/// The idle time field as the in-tree client computes it on a 64-bit
/// kernel: 0 when not connected, else `(long)(now - last_used) / HZ` with
/// wrapping subtraction and division truncating toward zero (0 if `hz` is 0
/// or does not fit a `long`).
pub fn idle_time_secs(connected: bool, now: u64, last_used: u64, hz: u64) -> i64 {
    if !connected {
        return 0;
    }
    let delta = i64::from_ne_bytes(now.wrapping_sub(last_used).to_ne_bytes());
    match i64::try_from(hz) {
        Ok(hz) => delta.checked_div(hz).unwrap_or(0),
        Err(_) => 0,
    }
}

/// A fixed-size formatting buffer for the kernel's stack.
///
/// Writing past the end fails with [`fmt::Error`] and keeps what fitted.
#[derive(Debug, Clone)]
pub struct LineBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> LineBuf<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        Self { buf: [0; N], len: 0 }
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// The text written so far.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets the contents.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl<const N: usize> Default for LineBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Write for LineBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    #[test]
    fn all_zero_line() {
        let mut s = String::new();
        write_mountstats(&mut s, &Counters::default()).unwrap();
        assert_eq!(s, "\txprt:\trdma 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n");
        assert_eq!(s.split(' ').count(), 28, "prefix word + 27 fields");
    }

    #[test]
    fn fields_in_order() {
        let c = Counters {
            bind_count: 2,
            connect_count: 3,
            connect_time: 4,
            idle_time: 5,
            sends: 6,
            recvs: 7,
            bad_xids: 8,
            req_u: 9,
            bklog_u: 10,
            read_chunk_count: 11,
            write_chunk_count: 12,
            reply_chunk_count: 13,
            total_rdma_request: 14,
            total_rdma_reply: 15,
            pullup_copy_count: 16,
            fixup_copy_count: 17,
            hardway_register_count: 18,
            failed_marshal_count: 19,
            bad_reply_count: 20,
            nomsg_call_count: 21,
            mrs_recycled: 22,
            mrs_orphaned: 23,
            mrs_allocated: 24,
            local_inv_needed: 25,
            empty_sendctx_q: 26,
        };
        let mut line = LineBuf::<MOUNTSTATS_MAX_LEN>::new();
        write_mountstats(&mut line, &c).unwrap();
        assert_eq!(
            line.as_str(),
            "\txprt:\trdma 0 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 0\n"
        );
    }

    #[test]
    fn realistic_line() {
        let c = Counters {
            bind_count: 0,
            connect_count: 1,
            connect_time: 0,
            idle_time: 12,
            sends: 35211,
            recvs: 35211,
            bad_xids: 0,
            req_u: 1258093,
            bklog_u: 0,
            read_chunk_count: 0,
            write_chunk_count: 8192,
            reply_chunk_count: 21,
            total_rdma_request: 8589934592,
            total_rdma_reply: 8589934592,
            pullup_copy_count: 0,
            fixup_copy_count: 1024,
            mrs_allocated: 128,
            ..Counters::default()
        };
        let mut s = String::new();
        write_mountstats(&mut s, &c).unwrap();
        assert_eq!(
            s,
            "\txprt:\trdma 0 0 1 0 12 35211 35211 0 1258093 0 0 8192 21 8589934592 8589934592 0 1024 0 0 0 0 0 0 128 0 0 0\n"
        );
    }

    #[test]
    fn longest_line_fits_exactly() {
        let m = u64::MAX;
        let c = Counters {
            bind_count: m,
            connect_count: m,
            connect_time: m,
            idle_time: i64::MIN,
            sends: m,
            recvs: m,
            bad_xids: m,
            req_u: m,
            bklog_u: m,
            read_chunk_count: m,
            write_chunk_count: m,
            reply_chunk_count: m,
            total_rdma_request: m,
            total_rdma_reply: m,
            pullup_copy_count: m,
            fixup_copy_count: m,
            hardway_register_count: m,
            failed_marshal_count: m,
            bad_reply_count: m,
            nomsg_call_count: m,
            mrs_recycled: m,
            mrs_orphaned: m,
            mrs_allocated: m,
            local_inv_needed: m,
            empty_sendctx_q: m,
        };
        // The buffer the kernel formats into: the line and its NUL.
        let mut line = LineBuf::<{ MOUNTSTATS_MAX_LEN + 1 }>::new();
        write_mountstats(&mut line, &c).unwrap();
        assert_eq!(line.len(), MOUNTSTATS_MAX_LEN);
        assert!(line.as_str().starts_with("\txprt:\trdma 0 18446744073709551615 18446744073709551615 18446744073709551615 -9223372036854775808 "));
        assert!(line.as_str().ends_with(" 18446744073709551615 0\n"));
        assert_eq!(line.write_str("\0"), Ok(()));
        // One byte short: the formatter reports the overflow.
        let mut short: LineBuf<{ MOUNTSTATS_MAX_LEN - 1 }> = LineBuf::new();
        assert_eq!(write_mountstats(&mut short, &c), Err(fmt::Error));
        assert!(short.len() < MOUNTSTATS_MAX_LEN);
    }

    #[test]
    fn line_buf_basics() {
        let mut b: LineBuf<4> = LineBuf::default();
        assert!(b.is_empty());
        assert_eq!(b.write_str("ab"), Ok(()));
        assert_eq!(b.write_str("cde"), Err(fmt::Error));
        assert_eq!(b.as_bytes(), b"ab");
        assert_eq!(b.write_str("cd"), Ok(()));
        assert_eq!(b.as_str(), "abcd");
        b.clear();
        assert_eq!(b.as_str(), "");
        let mut z: LineBuf<0> = LineBuf::new();
        assert_eq!(z.write_str(""), Ok(()));
        assert_eq!(z.write_str("x"), Err(fmt::Error));
    }

    #[test]
    fn marshal_accounting() {
        use super::super::plan::{plan_chunks, Kvec, Limits, XDRBUF_READ, XDRBUF_WRITE};
        let l = Limits {
            inline_send: 4096,
            inline_recv: 4096,
            max_send_sge: 19,
            page_size: 4096,
            max_pages_per_mr: 64,
            max_segments: 8,
            pullup_threshold: 2048,
            write_pad_segment: true,
        };
        let counts = |snd: &XdrBufDesc, rcv: &XdrBufDesc, ddp: bool| {
            let (call, reply) = plan_chunks(snd, rcv, ddp, &l).unwrap();
            MarshalCounts::of(&call, &reply, snd)
        };
        let small = XdrBufDesc { head: Kvec { page_offset: 0, len: 100 }, len: 100, ..Default::default() };
        // An inline Call with an inline Reply counts nothing.
        assert_eq!(counts(&small, &small, true), MarshalCounts::default());
        // Pulled-up inline Call with 1000 page bytes and a 4-byte tail.
        let snd = XdrBufDesc { head: Kvec { page_offset: 0, len: 120 }, page_len: 1000, tail: Kvec { page_offset: 0, len: 4 }, len: 1124, flags: XDRBUF_WRITE, ..Default::default() };
        assert_eq!(counts(&snd, &small, true), MarshalCounts { pullup_bytes: 1004, ..MarshalCounts::default() });
        // A 1 MiB WRITE: 4 Read segments at depth 64, nothing copied.
        let snd = XdrBufDesc { head: Kvec { page_offset: 0, len: 120 }, page_len: 1 << 20, len: 120 + (1 << 20), flags: XDRBUF_WRITE, ..Default::default() };
        assert_eq!(counts(&snd, &small, true), MarshalCounts { read_segments: 4, ..MarshalCounts::default() });
        // A READ of 5001 bytes: one segment plus the pad.
        let rcv = XdrBufDesc { head: Kvec { page_offset: 0, len: 200 }, page_len: 5001, tail: Kvec { page_offset: 0, len: 100 }, len: 5301, flags: XDRBUF_READ, ..Default::default() };
        assert_eq!(counts(&small, &rcv, true), MarshalCounts { write_segments: 2, rdma_request_bytes: 5005, ..MarshalCounts::default() });
        // krb5i: the same READ gets a Reply chunk; a big Call is a Long Call.
        let big = XdrBufDesc { head: Kvec { page_offset: 0, len: 8000 }, len: 8000, ..Default::default() };
        assert_eq!(
            counts(&big, &rcv, false),
            MarshalCounts { read_segments: 1, reply_segments: 3, rdma_request_bytes: 5301, nomsg_calls: 1, ..MarshalCounts::default() }
        );
    }

    #[test]
    fn counting_directly_agrees_with_the_counts() {
        use crate::plan::Kvec;
        use crate::testutil::Rng;
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut direct = 0;
        for _ in 0..50_000 {
            // Small segment counts, so that the usual shapes come up often.
            let segments = rng.below(3) as u32;
            let call = match rng.below(4) {
                0 => CallPlan::Inline { pullup: true },
                1 => CallPlan::Inline { pullup: false },
                2 => CallPlan::ReadChunk {
                    position: rng.low_u32(),
                    len: rng.low_u32(),
                    segments,
                    tail_skip: rng.below(4) as u32,
                    tail_len: rng.low_u32(),
                },
                _ => CallPlan::LongCall { len: rng.low_u32(), segments },
            };
            let segments = rng.below(3) as u32;
            let reply = match rng.below(3) {
                0 => ReplyPlan::Inline,
                1 => ReplyPlan::WriteChunk { len: rng.low_u32(), segments, pad_segment: rng.below(2) == 0 },
                _ => ReplyPlan::ReplyChunk { len: rng.low_u32(), segments },
            };
            let snd = XdrBufDesc {
                head: Kvec { page_offset: 0, len: rng.low_u32() },
                page_len: rng.low_u32(),
                tail: Kvec { page_offset: 0, len: rng.low_u32() },
                ..Default::default()
            };
            let mut got = MarshalCounts::default();
            let mut seen = [false; 6];
            MarshalCounts::count(&call, &reply, &snd, |c, n| {
                assert!(!core::mem::replace(&mut seen[c as usize], true), "{c:?} handed twice");
                match c {
                    MarshalCounter::ReadSegments => got.read_segments = n,
                    MarshalCounter::WriteSegments => got.write_segments = n,
                    MarshalCounter::ReplySegments => got.reply_segments = n,
                    MarshalCounter::RdmaRequestBytes => got.rdma_request_bytes = n,
                    MarshalCounter::PullupBytes => got.pullup_bytes = n,
                    MarshalCounter::NomsgCalls => got.nomsg_calls = n,
                }
            });
            assert_eq!(got, MarshalCounts::of(&call, &reply, &snd), "{call:?} {reply:?} {snd:?}");
            direct += usize::from(!seen[MarshalCounter::NomsgCalls as usize]);
        }
        // The direct arms ran (they never hand NomsgCalls), and so did the
        // general one.
        assert!(direct > 5_000 && direct < 45_000, "{direct}");
    }

    #[test]
    fn time_helpers() {
        assert_eq!(jiffies_to_secs(2500, 250), 10);
        assert_eq!(jiffies_to_secs(2499, 250), 9);
        assert_eq!(jiffies_to_secs(5, 0), 0);
        assert_eq!(idle_time_secs(false, 10_000, 0, 250), 0);
        assert_eq!(idle_time_secs(true, 10_000, 7_500, 250), 10);
        assert_eq!(idle_time_secs(true, 10_000, 9_999, 250), 0);
        // jiffies wrapped past last_used.
        assert_eq!(idle_time_secs(true, 100, u64::MAX - 149, 250), 1);
        // last_used in the future: negative, truncated toward zero like C.
        assert_eq!(idle_time_secs(true, 0, 300, 250), -1);
        assert_eq!(idle_time_secs(true, 0, 1, 250), 0);
        assert_eq!(idle_time_secs(true, 5, 0, 0), 0);
        assert_eq!(idle_time_secs(true, 5, 0, u64::MAX), 0);
        assert_eq!(idle_time_secs(true, 1 << 63, 0, 1), i64::MIN);
    }
}
