// SPDX-License-Identifier: GPL-2.0
//! rdma-peer: a scriptable RPC-over-RDMA server that misbehaves on purpose.
//!
//! It listens with rdma_cm, accepts the client's connections and answers
//! its RPCs: the NULL procedure (which the NFS client sends first when it
//! creates its RPC client) with success, every other procedure with
//! PROC_UNAVAIL, so that a mount against it fails cleanly after the first
//! exchanges. A *scenario* replaces one of these answers (the first call
//! of the first connection, unless the scenario says otherwise) or the
//! connection setup with hostile input; after it the peer behaves, so the
//! client's recovery can be seen too. Every event is logged on stdout, one
//! line each, for the selftests to check.
//!
//!     rdma-peer --listen 198.18.0.1:20050 --scenario NAME [--seconds N]
//!               [--proxy 127.0.0.1:2049] [--v2]
//!
//! Without `--v2` the peer speaks RPC-over-RDMA Version One only and
//! answers any other version with ERR_VERS 1..1, as knfsd does. With
//! `--v2` (proxy mode) it also speaks Version Two (draft-rpcrdma-version-two)
//! to a client that calls in it, and answers in the version of each call.
//!
//! With `--proxy`, the peer serves real NFS instead: it passes every call on
//! to the RPC server at that address over TCP and carries the reply back
//! with RDMA, as an RPC-over-RDMA server does (see `proxy`). The scenarios
//! marked "(proxy)" need it: they aim at a mounted client's data path.
//!
//! In every mode the peer also checks the client's credit accounting
//! (`credits`): a client with more calls outstanding than the peer granted
//! gets a `credit overrun: N outstanding, grant G` line in the log.
//!
//! With `--connect` it is a hostile *client* instead (`client`): it
//! connects to an RPC-over-RDMA server and checks its answers to the
//! scenario's messages.
//!
//! `rdma-peer --list` prints the catalogue; `rdma-peer --pattern N` writes
//! the N bytes of the file c-short-write reads.

mod checks;
mod client;
mod credits;
mod proxy;
mod verbs;

use std::{
    io,
    net::{SocketAddr, SocketAddrV4},
    process::ExitCode,
    time::{Duration, Instant},
};

use proxy::{CallInfo, Chunk, Upstream};
use rpcrdma_proto::{
    cm, v1, v2,
    xchar::{self, XchOp, Xchar, XcharSpec, XcharSubset},
};
use verbs::{Completion, Conn, Listener, Remote};

/// The scenarios and what each does (Documentation/hostile-peer.rst says
/// what the client must do about each).
const CATALOGUE: &[(&str, &str)] = &[
    ("good", "answer every call correctly"),
    ("truncated-N", "first reply cut to N bytes (N = 0..=27: inside the header)"),
    ("bad-version", "first reply with rdma_vers 2"),
    ("unknown-proc", "first reply with rdma_proc 5"),
    ("msgp", "first reply as RDMA_MSGP (RFC 5666, retired)"),
    ("done", "first reply as RDMA_DONE (RFC 5666, retired)"),
    ("error-vers", "first reply RDMA_ERROR / ERR_VERS 1..1"),
    ("error-chunk", "first reply RDMA_ERROR / ERR_CHUNK"),
    ("error-unknown", "first reply RDMA_ERROR with error code 7"),
    ("unknown-xid", "first reply carries an XID nobody asked for"),
    ("rpc-xid-mismatch", "first reply's header names the call, its RPC message another XID"),
    ("duplicate-reply", "first reply sent twice"),
    ("credits-0", "every reply grants 0 credits"),
    ("credits-max", "every reply grants 2^32-1 credits"),
    ("credits-2", "every reply grants 2 credits (proxy mode: under a real mount's load)"),
    ("credits-reconnect", "(proxy) as credits-2; on each connection its first call, and the first after its first reply, answered after 1.5 s; the first connection dropped on its 24th READ"),
    ("credits-abandon", "(proxy) as credits-2; the first READLINK answered only after 20 s, its Receive in use meanwhile"),
    ("huge-counts", "first reply's Write list claims 2^32-1 segments"),
    ("write-chunk-unoffered", "first reply carries a Write chunk the client never offered"),
    ("reply-chunk-unoffered", "first reply is RDMA_NOMSG with a Reply chunk never offered"),
    ("inv-foreign", "first reply is Send With Invalidate of an rkey that is not the client's"),
    ("reverse-call-chunks", "before the first reply, a backward call with a Read chunk"),
    ("reverse-call", "before the first reply, a backward call (no chunks)"),
    ("reverse-call-vers", "before the first reply, a backward call with rdma_vers 3"),
    ("disconnect-mid", "disconnect instead of answering the first call"),
    ("cm-none", "accept with no private data"),
    ("cm-garbage", "accept with 8 bytes of garbage private data"),
    ("cm-short", "accept with 3 bytes of private data"),
    ("cm-misplaced", "accept with the RFC 8797 message at offset 4 (2 KiB / 2 KiB)"),
    ("cm-8k", "(proxy) accept with 8 KiB send and receive sizes; replies still fit what the client advertised"),
    ("cm-change", "(proxy) accept the first connection with 2 KiB sizes, every later one with 8 KiB"),
    ("reject", "reject every connection with garbage private data"),
    ("write-chunk-long", "(proxy) first READ reply's Write chunk claims 4 KiB more than offered"),
    ("write-chunk-foreign", "(proxy) first READ reply's Write chunk names a handle never offered (no data written)"),
    ("write-chunk-short", "(proxy) first READ reply's Write chunk returned empty (nothing written), the READ's count unchanged"),
    ("write-chunk-roundup", "(proxy) first READ reply whose data is not a multiple of 4: the length returned includes the roundup (RFC 5666)"),
    ("write-chunk-pad", "(proxy) first READ reply whose data is not a multiple of 4: 0xee written into the pad bytes past it"),
    ("write-chunk-extra", "(proxy) first READ reply's Write chunk returns one segment more than offered"),
    ("reply-chunk-gap", "(proxy) first Reply chunk of 2+ segments: the first half filled, the rest full (unwritten bytes inside)"),
    ("reply-chunk-swapped", "(proxy) first Reply chunk of 2+ segments returned with its first two segments swapped"),
    ("reply-chunk-repeated", "(proxy) first Reply chunk of 2+ segments returned with its first segment's handle twice"),
    ("reply-chunk-long", "(proxy) first Reply chunk returned with its last used segment 4 KiB longer than its offer"),
    ("inv-stale", "(proxy) a reply is Send With Invalidate of an earlier RPC's rkey"),
    ("inv-other-rpc", "(proxy) a reply is Send With Invalidate of another pending RPC's rkey"),
    ("extra-sends", "(proxy) after a reply, 360 copies of it back to back: more Sends than the client has Receives"),
    ("drop-first", "(proxy) the first message of the first connection gets no answer (a lost Version Two probe)"),
    ("vers-none", "(proxy) Version Two calls get ERR_VERS 3..3: no version in common"),
    ("v2-malformed", "(proxy, --v2) the first Version Two reply is a header cut after its direction word"),
    ("v2-optional", "(proxy, --v2) after the first reply, an RDMA2_OPTIONAL call of an unknown type"),
    ("v2-reverse-call", "(proxy, --v2) after the first reply, Version Two backward calls: plain, with a Read chunk, and a CALL direction over an RPC reply"),
    ("xch-big", "(proxy, --v2) ROPT_INITXCH announces an 8 KiB Receive buffer"),
    ("xch-upd", "(proxy, --v2) ROPT_INITXCH says 4 KiB, ROPT_UPDXCH raises it to 8 KiB after 15 calls"),
    ("xch-req", "(proxy, --v2) after the first reply, ROPT_REQXCH asks the client for a 2 KiB Receive buffer"),
    ("xch-resp", "(proxy, --v2) after the first reply, an ROPT_RESPXCH the client never asked for"),
    ("xch-early", "(proxy, --v2) on each connection, ROPT_INITXCH announcing an 8 KiB Receive buffer ahead of the answer to the first call"),
    ("grant-done", "(proxy) as credits-2; after the first reply and every 16th, an RDMA_DONE with credits 2^32-1"),
    ("grant-unknown-xid", "(proxy) as credits-2; after the first reply and every 16th, a reply to no call with credits 2^32-1"),
    ("grant-error", "(proxy) as credits-2; after the first reply and every 16th, RDMA_ERROR / ERR_CHUNK for no call, credits 2^32-1"),
    ("grant-reverse", "(proxy) as credits-2; after the first reply and every 16th, a backward call (CB_NULL) with credits 2^32-1"),
    ("v2-probe-rejected", "(proxy, --v2) the Version Two probe gets RDMA2_ERROR / ERR_BAD_HEADER with credits 2^32-1; then as credits-2"),
];

/// What the peer advertises in its CM private data: its send and receive
/// sizes.
const PEER_INLINE: u32 = 4096;

const RPC_REPLY: u32 = 1;
const PROC_UNAVAIL: u32 = 3;
/// The credits the peer grants when it behaves.
const CREDITS: u32 = 8;
/// The grant-* scenarios send their message after the first reply and
/// then after every this many: a client takes a new grant from every
/// reply, so a false one only shows while calls are queued behind the
/// grant, under load.
const BAIT_EVERY: u32 = 16;
/// How long credits-abandon holds its call.
const HOLD_SECS: u64 = 20;
/// How long credits-reconnect holds each of its calls.
const RECONNECT_HOLD_MS: u64 = 1500;
/// credits-reconnect drops its first connection on this READ of it, with
/// the load's other readers queued behind the grant of 2.
const RECONNECT_AT_READ: u32 = 24;
/// The grant of the credits-2 scenarios.
const CREDITS_2: &[&str] = &["credits-2", "credits-abandon", "credits-reconnect", "grant-done", "grant-unknown-xid", "grant-error", "grant-reverse", "v2-probe-rejected"];

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// An accepted RPC reply: NULL succeeds, anything else is PROC_UNAVAIL.
fn rpc_reply(xid: u32, procedure: u32) -> Vec<u8> {
    let stat = if procedure == 0 { 0 } else { PROC_UNAVAIL };
    words(&[xid, RPC_REPLY, 0, 0, 0, stat])
}

/// A correct RDMA_MSG reply with no chunks.
fn good_reply(xid: u32, procedure: u32, credits: u32) -> Vec<u8> {
    let mut m = vec![0u8; 64];
    let n = v1::encode(&mut m, xid, credits, &v1::Body::Msg(v1::ChunkLists::NONE)).unwrap_or(0);
    m.truncate(n);
    m.extend(rpc_reply(xid, procedure));
    m
}

/// A call as the peer sees it.
struct Call {
    xid: u32,
    procedure: u32,
}

/// Parses a forward call; logs and returns `None` for anything else.
fn parse_call(msg: &[u8], log: &mut Log) -> Option<Call> {
    let limits = v1::Limits::DEFAULT;
    let (hdr, payload) = match v1::Header::decode_split(msg, &limits) {
        Ok(h) => h,
        Err(e) => {
            log.line(&format!("recv undecodable header ({} bytes): {e:?}", msg.len()));
            return None;
        }
    };
    match hdr.body {
        v1::Body::Msg(_) => {}
        v1::Body::Error(e) => {
            log.line(&format!("recv RDMA_ERROR xid={:#x} {e:?}", hdr.xid));
            return None;
        }
        other => {
            log.line(&format!("recv xid={:#x} procedure {:?}", hdr.xid, other.procedure()));
            return None;
        }
    }
    let w = |i: usize| payload.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (xid, dir, prog, procedure) = (w(0)?, w(1)?, w(3)?, w(5)?);
    if dir != 0 {
        log.line(&format!("recv RPC reply xid={xid:#x} ({} bytes)", payload.len()));
        return None;
    }
    log.line(&format!("recv call xid={xid:#x} prog={prog} proc={procedure} credits={}", hdr.credits));
    Some(Call { xid, procedure })
}

#[derive(Clone, Copy)]
struct Log {
    start: Instant,
}

impl Log {
    fn line(&mut self, s: &str) {
        println!("[{:8.3}] {s}", self.start.elapsed().as_secs_f64());
    }
}

struct Peer {
    scenario: String,
    log: Log,
    /// Connections accepted so far.
    conns: u32,
    /// The scenario has played its hostile part.
    done: bool,
    /// Proxy mode: where calls are passed on to.
    upstream: Option<Upstream>,
    /// What the client said in its CM private data.
    client: cm::PrivateData,
    /// Proxy mode: the handles of the last call that offered chunks.
    last_handles: Vec<u32>,
    /// Proxy mode, inv-other-rpc: a call held back until another arrives.
    held: Option<Vec<u8>>,
    /// Proxy mode, credits-abandon: a call held back until a time.
    held_until: Option<(Instant, Vec<u8>)>,
    /// credits-reconnect, on the current connection: 0 before its first
    /// call, 1 while that call is held, 2 once answered, 3 while the next
    /// call is held, 4 after.
    hold_phase: u8,
    /// credits-reconnect: NFSv3 READs received on the current connection.
    conn_reads: u32,
    /// credits-reconnect: the current connection is being dropped; what
    /// still arrives on it goes unanswered.
    dropping: bool,
    /// Proxy mode: calls answered on the current connection.
    conn_calls: u32,
    /// Proxy mode: calls answered.
    calls: u32,
    /// Speak Version Two to clients that call in it.
    v2: bool,
    /// Messages received on all connections.
    received: u32,
    /// Version Two: the client's Receive buffer size (its ROPT_INITXCH).
    client_rbsiz: u32,
    /// Version Two: our ROPT_INITXCH went out on this connection.
    sent_initxch: bool,
    /// The last call was in Version Two.
    last_v2: bool,
    /// Proxy mode: replies sent (RDMA_MSG or RDMA_NOMSG).
    replies: u32,
    /// grant-*: messages with a false grant sent.
    baits: u32,
}

/// A call as the proxy reads it, in either version.
struct Incoming<'a> {
    xid: u32,
    v2: bool,
    chunks: v1::Chunks<'a>,
    inline: &'a [u8],
}

/// Encodes a reply header of the given version granting `credits`:
/// RDMA_MSG, or RDMA_NOMSG when the reply went in the Reply chunk.
fn encode_reply(out: &mut [u8], v2: bool, xid: u32, credits: u32, nomsg: bool, lists: v1::ChunkLists<'_>) -> io::Result<usize> {
    encode_msg(out, v2, xid, credits, nomsg, v2::Direction::Reply, lists)
}

/// Encodes an RDMA_MSG or RDMA_NOMSG header of the given version; the
/// direction goes in a Version Two header only.
fn encode_msg(
    out: &mut [u8],
    v2: bool,
    xid: u32,
    credits: u32,
    nomsg: bool,
    direction: v2::Direction,
    lists: v1::ChunkLists<'_>,
) -> io::Result<usize> {
    let r = if v2 {
        let c = v2::Chunks { direction, lists };
        let body = if nomsg { v2::Body::NoMsg(c) } else { v2::Body::Msg(c) };
        v2::Header { xid, credit: credits, body }.encode(out).map_err(|e| format!("{e:?}"))
    } else {
        let body = if nomsg { v1::Body::NoMsg(lists) } else { v1::Body::Msg(lists) };
        v1::encode(out, xid, credits, &body).map_err(|e| format!("{e:?}"))
    };
    r.map_err(io::Error::other)
}

/// Every handle a call offered for its reply (Write chunks, Reply chunk).
fn reply_handles(c: &v1::Chunks<'_>) -> Vec<u32> {
    let mut h: Vec<u32> = c.writes.iter().flat_map(|a| a.iter()).chain(c.reply.iter().flat_map(|a| a.iter())).map(|s| s.handle).collect();
    h.dedup();
    h
}

/// Gives a returned Reply chunk (`used` of its segments written, `pieces`
/// the RDMA Writes that fill them, in segment order) the shape `scenario`
/// asks for; says what it did, or `None` if the chunk is too small for it.
fn mangle_reply_chunk(
    scenario: &str,
    offered: &[v1::Segment],
    rret: &mut Chunk,
    pieces: &mut [(Vec<u8>, Remote)],
    used: usize,
) -> Option<&'static str> {
    match scenario {
        "reply-chunk-gap" if used >= 2 && rret[0].length >= 8 => {
            // Half of the first segment is written and claimed, the rest
            // of the reply goes on in the next segments as usual.
            let cut = (rret[0].length / 2) & !3;
            rret[0].length = cut;
            pieces[0].0.truncate(cut as usize);
            pieces[0].1.len = cut;
            Some("with its first segment half filled and the next ones full")
        }
        "reply-chunk-swapped" if used >= 2 => {
            rret.swap(0, 1);
            Some("with its first two segments swapped")
        }
        "reply-chunk-repeated" if used >= 2 => {
            rret[1].handle = rret[0].handle;
            rret[1].offset = rret[0].offset;
            Some("naming its first segment's handle twice")
        }
        "reply-chunk-long" if used >= 1 => {
            // Longer than the segment offered, not just than written: a
            // responder claiming bytes it did not write inside the memory
            // it was given cannot be told from one that wrote them.
            rret[used - 1].length = offered[used - 1].length.saturating_add(4096);
            Some("with its last used segment 4096 bytes longer than offered")
        }
        _ => None,
    }
}

fn remote(s: &v1::Segment, len: usize) -> Remote {
    Remote { rkey: s.handle, len: len as u32, addr: s.offset }
}

impl Peer {
    /// The peer decodes Version Two (else answers it with ERR_VERS).
    fn speaks_v2(&self) -> bool {
        self.v2 && self.scenario != "vers-none"
    }

    /// The grant of every reply (and of every other message of the peer's
    /// but the grant-* scenarios' false ones).
    fn grant(&self) -> u32 {
        match self.scenario.as_str() {
            "credits-0" => 0,
            "credits-max" => u32::MAX,
            s if CREDITS_2.contains(&s) => 2,
            _ => CREDITS,
        }
    }

    /// The send and receive sizes the peer advertises (its Receives hold
    /// `verbs::SLOT` bytes).
    fn peer_inline(&self) -> u32 {
        self.peer_inline_of(self.conns)
    }

    /// [`Self::peer_inline`] of connection `n` (the first is 1).
    fn peer_inline_of(&self, n: u32) -> u32 {
        match self.scenario.as_str() {
            "cm-8k" => verbs::SLOT as u32,
            "cm-change" if n <= 1 => 2048,
            "cm-change" => verbs::SLOT as u32,
            _ => PEER_INLINE,
        }
    }

    /// The private data to accept with, or `None` to reject.
    fn accept_pdata(&self) -> Option<Vec<u8>> {
        // For the connection being accepted.
        let size = self.peer_inline_of(self.conns + 1);
        let ours = cm::PrivateData::new(size, size, true).to_bytes().to_vec();
        Some(match self.scenario.as_str() {
            "cm-none" => Vec::new(),
            "cm-garbage" => vec![0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04],
            "cm-short" => ours[..3].to_vec(),
            "cm-misplaced" => {
                let mut v = vec![0u8; 4];
                v.extend(cm::PrivateData::new(2048, 2048, false).to_bytes());
                v
            }
            "reject" => return None,
            _ => ours,
        })
    }

    /// Answers one call.
    fn answer(&mut self, conn: &mut Conn, call: &Call) -> std::io::Result<()> {
        let (xid, p) = (call.xid, call.procedure);
        let credits = self.grant();
        let good = good_reply(xid, p, credits);
        if self.done {
            return conn.send(&good, None);
        }
        self.done = true;
        let body = rpc_reply(xid, p);
        let with = |hdr: &[u32]| {
            let mut m = words(hdr);
            m.extend(&body);
            m
        };
        let s = self.scenario.clone();
        let msg: Vec<u8> = match s.as_str() {
            "good" | "credits-0" | "credits-max" | "credits-2" | "cm-none" | "cm-garbage" | "cm-short" | "cm-misplaced" => good,
            t if t.starts_with("truncated-") => {
                let n: usize = t["truncated-".len()..].parse().unwrap_or(0);
                good[..n.min(good.len())].to_vec()
            }
            "bad-version" => with(&[xid, 2, credits, 0, 0, 0, 0]),
            "unknown-proc" => with(&[xid, 1, credits, 5, 0, 0, 0]),
            "msgp" => with(&[xid, 1, credits, 2, 4, 1024, 0, 0, 0]),
            "done" => words(&[xid, 1, credits, 3]),
            "error-vers" => words(&[xid, 1, credits, 4, 1, 1, 1]),
            "error-chunk" => words(&[xid, 1, credits, 4, 2]),
            "error-unknown" => words(&[xid, 1, credits, 4, 7]),
            "unknown-xid" => good_reply(xid ^ 0x5a5a_5a5a, p, credits),
            "rpc-xid-mismatch" => {
                let mut m = words(&[xid, 1, credits, 0, 0, 0, 0]);
                m.extend(rpc_reply(xid ^ 0x5a5a_5a5a, p));
                m
            }
            "duplicate-reply" => {
                conn.send(&good, None)?;
                good
            }
            "huge-counts" => words(&[xid, 1, credits, 0, 0, 1, u32::MAX]),
            "write-chunk-unoffered" => with(&[xid, 1, credits, 0, 0, 1, 1, 0x1234, 4096, 0, 0x1000, 0, 0]),
            "reply-chunk-unoffered" => words(&[xid, 1, credits, 1, 0, 0, 1, 1, 0x1234, 4096, 0, 0x1000]),
            "inv-foreign" => {
                let rkey = conn.own_rkey();
                self.log.line(&format!("send reply xid={xid:#x} with invalidate of rkey {rkey:#x} (ours)"));
                return conn.send(&good, Some(rkey));
            }
            "reverse-call-chunks" | "reverse-call" | "reverse-call-vers" => {
                // The backward call goes first, so that the client has
                // answered it before the reply lets its mount go on: else
                // a mount that fails fast can close the connection while
                // the answer is still queued.
                let bxid = 0x7e57_0001;
                let lists: &[u32] = if s == "reverse-call-chunks" {
                    &[1, 0, 0x4321, 512, 0, 0x2000, 0, 0, 0]
                } else {
                    &[0, 0, 0]
                };
                let vers = if s == "reverse-call-vers" { 3 } else { 1 };
                let mut m = words(&[bxid, vers, 2, 0]);
                m.extend(words(lists));
                // CB_NULL of the NFSv4 callback program.
                m.extend(words(&[bxid, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0]));
                self.log.line(&format!("send backward call xid={bxid:#x} ({s})"));
                conn.send(&m, None)?;
                good
            }
            "disconnect-mid" => {
                self.log.line("disconnect instead of replying");
                conn.disconnect();
                return Ok(());
            }
            other => {
                self.log.line(&format!("unknown scenario {other}: answering correctly"));
                good
            }
        };
        self.log.line(&format!("send {s} reply for xid={xid:#x} ({} bytes)", msg.len()));
        conn.send(&msg, None)
    }
}

impl Peer {
    /// Proxy mode: one message from the client.
    /// Read once here (`parse` logs what is not a call); what is not a
    /// call gets no answer.
    fn proxy(&mut self, conn: &mut Conn, msg: &[u8]) -> io::Result<()> {
        let inc = match self.parse(msg) {
            Ok(Some(inc)) => inc,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.log.line(&e);
                return Ok(());
            }
        };
        let handles = reply_handles(&inc.chunks);
        let s = self.scenario.clone();
        if s == "credits-abandon" && !self.done {
            // The first NFSv3 READLINK is answered only after a while, its
            // Receive counted as in use meanwhile: the client's reader is
            // killed in between.
            let info = if inc.chunks.reads.is_empty() { CallInfo::of(inc.inline).map(|i| (inc.xid, i)) } else { None };
            if let Some((xid, _)) = info.filter(|(_, i)| (i.prog, i.vers, i.procedure) == (100003, 3, 5)) {
                self.done = true;
                self.log.line(&format!("holding the READLINK xid={xid:#x} for {HOLD_SECS} s"));
                self.held_until = Some((Instant::now() + Duration::from_secs(HOLD_SECS), msg.to_vec()));
                return Ok(());
            }
        }
        // The first call of each connection, and the first after its first
        // reply, answered only after a while: whatever else the client
        // sends meanwhile is counted against a grant of 1, then 2 (less
        // Version Two's ROPT_INITXCH, which takes a Receive too).
        if s == "credits-reconnect" && self.held_until.is_none() && matches!(self.hold_phase, 0 | 2) {
            let which = if self.hold_phase == 0 { "first call" } else { "first call after the first reply" };
            self.log.line(&format!("holding the {which} xid={:#x} of connection {} for {RECONNECT_HOLD_MS} ms", inc.xid, self.conns));
            self.hold_phase += 1;
            self.held_until = Some((Instant::now() + Duration::from_millis(RECONNECT_HOLD_MS), msg.to_vec()));
            return Ok(());
        }
        // Once both holds are over, the first connection goes down on its
        // RECONNECT_AT_READ-th READ, left unanswered: the load's other
        // readers have calls queued behind the grant then, whatever the
        // speed of the machine, and the client must bring them to the next
        // connection within its first credit.
        if s == "credits-reconnect"
            && !self.done
            && self.hold_phase == 4
            && CallInfo::of(inc.inline).is_some_and(|i| (i.prog, i.vers, i.procedure) == (100003, 3, 6))
        {
            self.conn_reads += 1;
            if self.conn_reads == RECONNECT_AT_READ {
                self.done = true;
                self.log.line(&format!(
                    "disconnecting on READ {} xid={:#x} of connection {}, unanswered",
                    self.conn_reads, inc.xid, self.conns
                ));
                self.dropping = true;
                conn.disconnect();
                return Ok(());
            }
        }
        if self.dropping {
            return Ok(());
        }
        let mut force_inv = None;
        if !self.done && !handles.is_empty() {
            match s.as_str() {
                "inv-other-rpc" => match self.held.take() {
                    None => {
                        self.log.line("holding this call until another one with chunks arrives");
                        self.held = Some(msg.to_vec());
                        return Ok(());
                    }
                    Some(first) => {
                        self.done = true;
                        self.log.line(&format!("answering the held call with invalidate of rkey {:#x} (the next call's)", handles[0]));
                        self.proxy_one(conn, &first, Some(handles[0]))?;
                    }
                },
                // The tenth call with chunks names the previous one's rkey,
                // long invalidated by the client.
                "inv-stale" if self.calls >= 10 && !self.last_handles.is_empty() => {
                    self.done = true;
                    force_inv = self.last_handles.first().copied();
                    self.log.line(&format!("answering with invalidate of rkey {:#x} (an earlier call's)", force_inv.unwrap_or(0)));
                }
                _ => {}
            }
        }
        let reply = self.proxy_one(conn, msg, force_inv)?;
        if !handles.is_empty() {
            self.last_handles = handles;
        }
        if s == "extra-sends" && !self.done && self.calls >= 10 {
            if let Some(reply) = reply {
                self.done = true;
                self.log.line("sending 360 copies of the last reply back to back");
                for _ in 0..3 {
                    for i in 0..120 {
                        conn.send_chain(&reply, None, &[], i == 119)?;
                    }
                }
                self.log.line("extra sends done");
            }
        }
        Ok(())
    }

    /// grant-*: right after the reply to `xid` (in Version Two if
    /// `is_v2`), a message whose credit field says 2^32-1 but which is no
    /// grant: it answers no pending call, or is no reply at all. A client
    /// that takes it as one sends the calls queued behind the grant of 2,
    /// and the peer logs a credit overrun.
    fn bait(&mut self, conn: &mut Conn, xid: u32, is_v2: bool) -> io::Result<()> {
        self.baits += 1;
        let n = self.baits;
        let max = u32::MAX;
        // An XID no call has.
        let mut unknown = 0xbad0_0000 | (n & 0xffff);
        while conn.is_pending(unknown) || unknown == xid {
            unknown = unknown.wrapping_add(1);
        }
        let mut out = vec![0u8; 64];
        let (what, m) = match self.scenario.as_str() {
            // Version One's procedure 3 (RFC 5666), retired; never in
            // Version Two, so a Version Two client gets it as such too.
            "grant-done" => (format!("RDMA_DONE xid={xid:#x}"), words(&[xid, 1, max, v1::RDMA_DONE])),
            "grant-unknown-xid" => {
                let k = encode_reply(&mut out, is_v2, unknown, max, false, v1::ChunkLists::NONE)?;
                out.truncate(k);
                out.extend(rpc_reply(unknown, 0));
                (format!("reply xid={unknown:#x} (no such call)"), out)
            }
            "grant-error" if is_v2 => {
                let k = v2::Header::error(unknown, max, v2::ErrorBody::BadHeader).encode(&mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
                out.truncate(k);
                (format!("RDMA2_ERROR / ERR_BAD_HEADER xid={unknown:#x} (no such call)"), out)
            }
            "grant-error" => (
                format!("RDMA_ERROR / ERR_CHUNK xid={unknown:#x} (no such call)"),
                words(&[unknown, 1, max, v1::RDMA_ERROR, v1::ERR_CHUNK]),
            ),
            "grant-reverse" => {
                // CB_NULL of the NFSv4 callback program, which an NFSv3
                // mount does not serve; its credit field asks for backward
                // credits.
                let bxid = 0x7e57_1000 | (n & 0xfff);
                let k = encode_msg(&mut out, is_v2, bxid, max, false, v2::Direction::Call, v1::ChunkLists::NONE)?;
                out.truncate(k);
                out.extend(words(&[bxid, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0]));
                (format!("backward call xid={bxid:#x} (CB_NULL)"), out)
            }
            _ => return Ok(()),
        };
        self.log.line(&format!("send {what}, credits {max} (after reply {} xid={xid:#x})", self.replies));
        conn.send_chain(&m, None, &[], true)
    }

    /// Version Two: our ROPT_INITXCH, once per connection.
    fn send_initxch(&mut self, conn: &mut Conn) -> io::Result<()> {
        self.sent_initxch = true;
        let mut out = [0u8; 256];
        let rbsiz = if matches!(self.scenario.as_str(), "xch-big" | "xch-early") { 8192 } else { 4096 };
        let vals = [Xchar::RecvBufSize(rbsiz), Xchar::ReqRemInv(false), Xchar::BackwardRequest(xchar::BkReqSup::Inline)];
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::empty() };
        let n = op.encode_message(0x7200_0001, self.grant(), v2::Direction::Reply, &mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
        self.log.line(&format!("send ROPT_INITXCH rbsiz={rbsiz}"));
        conn.send(&out[..n], None)
    }

    /// Version Two: the transport characteristics messages the peer sends
    /// (xcharext): its ROPT_INITXCH after the first reply of each
    /// connection (xch-early: before it, see the receive loop), and what
    /// the scenario adds.
    fn xch(&mut self, conn: &mut Conn) -> io::Result<()> {
        if !self.v2 || self.conn_calls == 0 || !self.last_v2 {
            return Ok(());
        }
        let mut out = [0u8; 256];
        let reply = v2::Direction::Reply;
        let s = self.scenario.clone();
        let grant = self.grant();
        if !self.sent_initxch {
            self.send_initxch(conn)?;
            if s == "xch-resp" {
                let none = XcharSubset::empty();
                let op = XchOp::RespXch { done: none, rej: none, pend: none };
                let n = op.encode_message(0x7200_0004, grant, reply, &mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
                self.log.line("send ROPT_RESPXCH xid=0x72000004 (unsolicited)");
                conn.send(&out[..n], None)?;
            }
            if s == "xch-req" {
                let want = [Xchar::RecvBufSize(2048)];
                let op = XchOp::ReqXch { want: XcharSpec::from_slice(&want) };
                let n = op.encode_message(0x7200_0002, grant, reply, &mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
                self.log.line("send ROPT_REQXCH xid=0x72000002 rbsiz=2048");
                conn.send(&out[..n], None)?;
            }
        }
        if s == "xch-upd" && !self.done && self.calls >= 15 {
            self.done = true;
            let op = XchOp::UpdXch { now: Xchar::RecvBufSize(8192), pendclr: false };
            let n = op.encode_message(0x7200_0003, grant, reply, &mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
            self.log.line("send ROPT_UPDXCH rbsiz=8192");
            conn.send(&out[..n], None)?;
        }
        Ok(())
    }

    /// Reads a call in Version One or (with `--v2`) Two. `Ok(None)` for a
    /// message that is not a call with chunk lists (logged).
    fn parse<'m>(&mut self, msg: &'m [u8]) -> Result<Option<Incoming<'m>>, String> {
        if self.v2 && v1::peek(msg).map(|p| p.vers) == Ok(2) {
            let (h, inline) = v2::Header::decode(msg).map_err(|e| format!("recv undecodable Version Two header: {e:?}"))?;
            return match h.body {
                v2::Body::Msg(c) | v2::Body::NoMsg(c) if c.direction == v2::Direction::Call => {
                    Ok(Some(Incoming { xid: h.xid, v2: true, chunks: c.lists, inline }))
                }
                v2::Body::Optional(o) if xchar::is_xchar_opttype(o.opttype) => {
                    match XchOp::from_optional(&o) {
                        Ok(op) => {
                            if let XchOp::InitXch { start, .. } = &op {
                                for x in start.iter() {
                                    if let Xchar::RecvBufSize(n) = x {
                                        self.client_rbsiz = n;
                                    }
                                }
                            }
                            self.log.line(&format!("recv Version Two xid={:#x}: xchar {op:?}", h.xid));
                        }
                        Err(e) => self.log.line(&format!("recv Version Two xid={:#x}: bad xchar message {e:?}", h.xid)),
                    }
                    Ok(None)
                }
                other => {
                    self.log.line(&format!("recv Version Two xid={:#x}: {other:?}", h.xid));
                    Ok(None)
                }
            };
        }
        let (hdr, inline) = v1::Header::decode_split(msg, &v1::Limits::DEFAULT)
            .map_err(|e| format!("recv undecodable header ({} bytes): {e:?}", msg.len()))?;
        match hdr.body.chunks() {
            Some(c) => Ok(Some(Incoming { xid: hdr.xid, v2: false, chunks: *c, inline })),
            None => {
                self.log.line(&format!("recv xid={:#x} procedure {:?}", hdr.xid, hdr.body.procedure()));
                Ok(None)
            }
        }
    }

    /// Proxy mode: passes one call on and sends its reply back; returns
    /// the RPC-over-RDMA message sent, if it was sent inline.
    fn proxy_one(&mut self, conn: &mut Conn, msg: &[u8], force_inv: Option<u32>) -> io::Result<Option<Vec<u8>>> {
        let inc = match self.parse(msg) {
            Ok(Some(inc)) => inc,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.log.line(&e);
                return Ok(None);
            }
        };
        let (xid, is_v2, inline) = (inc.xid, inc.v2, inc.inline);
        self.last_v2 = is_v2;
        let chunks = &inc.chunks;
        let grant = self.grant();
        let err_chunk = |conn: &mut Conn| {
            // Version Two has no ERR_CHUNK: BAD_HEADER is the nearest.
            let e = if is_v2 { words(&[xid, 2, grant, 4, 2]) } else { words(&[xid, 1, grant, 4, 2]) };
            conn.send_chain(&e, None, &[], true)
        };
        let mut data = Vec::new();
        for ch in chunks.reads.chunks() {
            let segs: Vec<Remote> = ch.segments.iter().map(|r| remote(&r.segment, r.segment.length as usize)).collect();
            data.push(conn.read_remote(&segs)?);
        }
        let Some(call) = proxy::assemble(inline, &chunks.reads, &data) else {
            self.log.line(&format!("xid={xid:#x}: Read chunk positions do not fit the call"));
            return err_chunk(conn).map(|_| None);
        };
        let Some(info) = CallInfo::of(&call) else {
            self.log.line(&format!("recv xid={xid:#x}: not an RPC call ({} bytes)", call.len()));
            return Ok(None);
        };
        self.calls += 1;
        self.conn_calls += 1;
        let upstream = self.upstream.as_mut().ok_or_else(|| io::Error::other("no upstream"))?;
        let reply = upstream.call(&call)?;
        let writes: Vec<Chunk> = chunks.writes.iter().map(|a| a.iter().collect()).collect();
        let reply_chunk: Option<Chunk> = chunks.reply.map(|a| a.iter().collect());
        // The Write chunks go back with the bytes written in each segment.
        let mut returned: Vec<Chunk> =
            writes.iter().map(|c| c.iter().map(|s| v1::Segment { length: 0, ..*s }).collect()).collect();
        let mut rdma: Vec<(Vec<u8>, Remote)> = Vec::new();
        let mut body = reply.clone();
        let mut ddp = false;
        // The data's length and the segment its last byte went to.
        let (mut ddp_len, mut last_seg) = (0usize, 0usize);
        if let (Some(first), Some((at, len))) = (writes.first(), proxy::ddp_item(&info, &reply)) {
            if let Some(parts) = proxy::spread(len, first) {
                ddp_len = len;
                for (range, i) in parts {
                    last_seg = i;
                    returned[0][i].length = range.len() as u32;
                    rdma.push((reply[at + range.start..at + range.end].to_vec(), remote(&first[i], range.len())));
                }
                body = reply[..at].to_vec();
                body.extend_from_slice(reply.get(at + proxy::pad4(len)..).unwrap_or(&[]));
                ddp = true;
            }
        }
        let s = self.scenario.clone();
        if ddp && !self.done {
            match s.as_str() {
                "write-chunk-long" => {
                    self.done = true;
                    if let Some(seg) = returned[0].iter_mut().rev().find(|g| g.length > 0) {
                        seg.length = seg.length.saturating_add(4096);
                    }
                    self.log.line(&format!("xid={xid:#x}: Write chunk returned 4096 bytes longer than written and offered"));
                }
                "write-chunk-extra" => {
                    self.done = true;
                    let first = returned[0][0];
                    returned[0].push(first);
                    self.log.line(&format!("xid={xid:#x}: Write chunk returned with one segment more than offered"));
                }
                "write-chunk-short" => {
                    self.done = true;
                    rdma.clear();
                    for seg in returned[0].iter_mut() {
                        seg.length = 0;
                    }
                    self.log.line(&format!("xid={xid:#x}: Write chunk returned empty, nothing written, the count left as it was"));
                }
                // Junk where the data's XDR pad would go, inside the
                // segment offered but past the length returned.
                "write-chunk-pad" if ddp_len % 4 != 0 => {
                    let pad = proxy::pad4(ddp_len) - ddp_len;
                    let room = writes[0][last_seg].length.saturating_sub(returned[0][last_seg].length) as usize;
                    if let Some((data, r)) = rdma.last_mut().filter(|_| room >= pad) {
                        self.done = true;
                        data.extend(std::iter::repeat_n(0xee, pad));
                        r.len += pad as u32;
                        self.log.line(&format!(
                            "xid={xid:#x}: Write chunk of {ddp_len} bytes returned with {pad} bytes 0xee written after them"
                        ));
                    }
                }
                // RFC 5666 section 3.7: the roundup not written, but
                // counted in the length returned.
                "write-chunk-roundup" if ddp_len % 4 != 0 => {
                    let pad = (proxy::pad4(ddp_len) - ddp_len) as u32;
                    let seg = &mut returned[0][last_seg];
                    if writes[0][last_seg].length >= seg.length + pad {
                        self.done = true;
                        seg.length += pad;
                        self.log.line(&format!(
                            "xid={xid:#x}: Write chunk of {ddp_len} bytes returned as {} (roundup counted, not written)",
                            proxy::pad4(ddp_len)
                        ));
                    }
                }
                "write-chunk-foreign" => {
                    self.done = true;
                    rdma.clear();
                    for seg in returned[0].iter_mut() {
                        seg.handle ^= 0x5a00;
                    }
                    self.log.line(&format!("xid={xid:#x}: Write chunk returned with a foreign handle, nothing written"));
                }
                _ => {}
            }
        }
        // Version Two's default inline threshold is 4096 both ways; Version
        // One's comes from the client's CM private data (1024 without).
        let max_inline = if is_v2 { self.client_rbsiz.min(verbs::SLOT as u32) } else { self.client.recv_size.min(self.peer_inline()) } as usize;
        let hdr_extra = if is_v2 { 4 } else { 0 };
        let wrefs: Vec<&[v1::Segment]> = returned.iter().map(|c| c.as_slice()).collect();
        let lists = v1::ChunkLists { reads: &[], writes: &wrefs, reply: None };
        let mut out = vec![0u8; 1024];
        let (sent_inline, how) = if v1::FIXED_HEADER_LEN + hdr_extra + lists.encoded_len() + body.len() <= max_inline {
            let n = encode_reply(&mut out, is_v2, xid, grant, false, lists)?;
            out.truncate(n);
            out.extend_from_slice(&body);
            (true, if ddp { "Write chunk" } else { "inline" })
        } else if let Some(rc) = &reply_chunk {
            let Some(parts) = proxy::spread(body.len(), rc) else {
                self.log.line(&format!("xid={xid:#x}: reply of {} bytes does not fit the Reply chunk: ERR_CHUNK", body.len()));
                return err_chunk(conn).map(|_| None);
            };
            let mut rret: Chunk = rc.iter().map(|s| v1::Segment { length: 0, ..*s }).collect();
            let first_piece = rdma.len();
            let used = parts.len();
            for (range, i) in parts {
                rret[i].length = range.len() as u32;
                rdma.push((body[range.clone()].to_vec(), remote(&rc[i], range.len())));
            }
            if !self.done && s.starts_with("reply-chunk-") {
                if let Some(what) = mangle_reply_chunk(&s, rc, &mut rret, &mut rdma[first_piece..], used) {
                    self.done = true;
                    self.log.line(&format!("xid={xid:#x}: Reply chunk of {} segments returned {what}", rc.len()));
                }
            }
            let lists = v1::ChunkLists { reads: &[], writes: &wrefs, reply: Some(&rret) };
            let n = encode_reply(&mut out, is_v2, xid, grant, true, lists)?;
            out.truncate(n);
            (false, "Reply chunk")
        } else {
            self.log.line(&format!("xid={xid:#x}: reply of {} bytes fits neither inline nor a chunk: ERR_CHUNK", body.len()));
            return err_chunk(conn).map(|_| None);
        };
        // Send With Invalidate when the client can take it and offered a
        // single region for its reply (as knfsd does).
        if is_v2 && s == "v2-malformed" && !self.done {
            self.done = true;
            self.log.line(&format!("xid={xid:#x}: Version Two reply cut after its direction word"));
            return conn.send_chain(&out[..20.min(out.len())], None, &[], true).map(|_| None);
        }
        let offered = reply_handles(chunks);
        let inv = force_inv.or(if self.client.remote_invalidate && offered.len() == 1 { offered.first().copied() } else { None });
        self.log.line(&format!(
            "xid={xid:#x} rpcrdma v{} prog={} vers={} proc={}: {} reply bytes, {how}{}",
            if is_v2 { 2 } else { 1 },
            info.prog,
            info.vers,
            info.procedure,
            reply.len(),
            inv.map(|k| format!(", invalidate {k:#x}")).unwrap_or_default()
        ));
        let wr: Vec<(&[u8], Remote)> = rdma.iter().map(|(d, r)| (d.as_slice(), *r)).collect();
        conn.send_chain(&out, inv, &wr, true)?;
        self.replies += 1;
        if s.starts_with("grant-") && self.replies % BAIT_EVERY == 1 {
            self.bait(conn, xid, is_v2)?;
        }
        Ok(sent_inline.then_some(out))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if args.iter().any(|a| a == "--list") {
        for (name, what) in CATALOGUE.iter().chain(client::CATALOGUE) {
            println!("{name:24} {what}");
        }
        return ExitCode::SUCCESS;
    }
    if let Some(n) = opt("--pattern") {
        // The file c-short-write reads, for the test to put on the server.
        let Ok(n) = n.parse::<usize>() else {
            eprintln!("rdma-peer: bad length {n}");
            return ExitCode::from(2);
        };
        let bytes: Vec<u8> = (0..n).map(client::pattern).collect();
        return match std::io::Write::write_all(&mut std::io::stdout(), &bytes) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rdma-peer: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let (Some(connect), Some(scenario)) = (opt("--connect"), opt("--scenario")) {
        let Ok(addr) = connect.parse::<SocketAddrV4>() else {
            eprintln!("rdma-peer: bad address {connect}");
            return ExitCode::from(2);
        };
        let mut log = Log { start: Instant::now() };
        return match client::run(addr, &scenario, log) {
            Ok(()) => {
                log.line(&format!("PASS {scenario}"));
                ExitCode::SUCCESS
            }
            Err(why) => {
                log.line(&format!("FAIL {scenario}: {why}"));
                ExitCode::FAILURE
            }
        };
    }
    let (Some(listen), Some(scenario)) = (opt("--listen"), opt("--scenario")) else {
        eprintln!(
            "usage: rdma-peer --listen ADDR:PORT --scenario NAME [--seconds N] [--proxy ADDR:PORT] [--v2] | --connect ADDR:PORT --scenario c-NAME | --list | --pattern N"
        );
        return ExitCode::from(2);
    };
    let Ok(addr) = listen.parse::<SocketAddrV4>() else {
        eprintln!("rdma-peer: bad address {listen}");
        return ExitCode::from(2);
    };
    let seconds: u64 = opt("--seconds").and_then(|s| s.parse().ok()).unwrap_or(120);
    let upstream = match opt("--proxy").map(|a| a.parse::<SocketAddr>()) {
        None => None,
        Some(Ok(a)) => Some(Upstream::new(a)),
        Some(Err(_)) => {
            eprintln!("rdma-peer: bad --proxy address");
            return ExitCode::from(2);
        }
    };
    let mut peer = Peer {
        scenario,
        log: Log { start: Instant::now() },
        conns: 0,
        done: false,
        upstream,
        client: cm::PrivateData::DEFAULT,
        last_handles: Vec::new(),
        held: None,
        held_until: None,
        hold_phase: 0,
        conn_reads: 0,
        dropping: false,
        conn_calls: 0,
        calls: 0,
        v2: args.iter().any(|a| a == "--v2"),
        received: 0,
        client_rbsiz: xchar::DEFAULT_RBSIZ,
        sent_initxch: false,
        last_v2: false,
        replies: 0,
        baits: 0,
    };
    let listener = match Listener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rdma-peer: {e}");
            return ExitCode::FAILURE;
        }
    };
    peer.log.line(&format!("listening on {addr}, scenario {}", peer.scenario));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut conn: Option<Conn> = None;
    while Instant::now() < deadline {
        let wait = if conn.is_some() { Duration::from_millis(1) } else { Duration::from_millis(200) };
        match listener.event(wait) {
            Ok(Some(ev)) => {
                let pd = ev.private_data.iter().take(16).map(|b| format!("{b:02x}")).collect::<String>();
                peer.log.line(&format!("cm {} status={} private_data={pd}", ev.name, ev.status));
                match ev.kind {
                    verbs::CONNECT_REQUEST => {
                        if let Some(p) = cm::PrivateData::find(&ev.private_data) {
                            peer.log.line(&format!("client private data: {p:?}"));
                        }
                        peer.client = cm::PrivateData::find_or_default(&ev.private_data);
                        peer.held = None;
                        peer.held_until = None;
                        peer.hold_phase = 0;
                        peer.conn_reads = 0;
                        peer.dropping = false;
                        peer.conn_calls = 0;
                        peer.sent_initxch = false;
                        peer.client_rbsiz = xchar::DEFAULT_RBSIZ;
                        // One connection at a time: a new one replaces the old.
                        conn = None;
                        match peer.accept_pdata() {
                            None => {
                                let r = ev.id.reject(&[0xff, 0xee, 0xdd]);
                                peer.log.line(&format!("rejected: {r:?}"));
                            }
                            Some(pdata) => match Conn::accept(ev.id, &pdata, ev.responder_resources, peer.speaks_v2(), peer.log) {
                                Ok(c) => {
                                    peer.conns += 1;
                                    peer.log.line(&format!("accepted connection {}", peer.conns));
                                    conn = Some(c);
                                }
                                Err(e) => peer.log.line(&format!("accept failed: {e}")),
                            },
                        }
                    }
                    verbs::DISCONNECTED => conn = None,
                    _ => {}
                }
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("rdma-peer: {e}");
                return ExitCode::FAILURE;
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        if peer.held_until.as_ref().is_some_and(|(t, _)| Instant::now() >= *t) {
            if let Some((_, msg)) = peer.held_until.take() {
                peer.log.line("answering the held call");
                if peer.hold_phase % 2 == 1 {
                    peer.hold_phase += 1;
                }
                if let Err(e) = peer.proxy_one(c, &msg, None) {
                    peer.log.line(&format!("proxy: {e}: disconnecting"));
                    c.disconnect();
                }
            }
        }
        let mut flushed = false;
        loop {
            match c.poll() {
                Ok(Some(Completion::Recv { slot, len, .. })) => {
                    let msg = c.received(slot, len).to_vec();
                    // A Version One server answers any other version with
                    // ERR_VERS 1..1 (RFC 8166 section 4.5), echoing the
                    // version asked for, as knfsd does.
                    peer.received += 1;
                    if peer.scenario == "drop-first" && peer.received == 1 {
                        peer.log.line(&format!("dropping the first message ({} bytes)", msg.len()));
                        if let Ok(p) = v1::peek(&msg) {
                            c.forget(p.xid);
                        }
                        if let Err(e) = c.post_recv(slot) {
                            peer.log.line(&format!("repost failed: {e}"));
                        }
                        continue;
                    }
                    if peer.scenario == "v2-probe-rejected" && peer.speaks_v2() && peer.received == 1 {
                        if let Some(p) = v1::peek(&msg).ok().filter(|p| p.vers == v2::RPCRDMA_VERSION_2) {
                            // The client learns that Version Two is spoken,
                            // its first call fails, and no grant came.
                            peer.done = true;
                            let mut e = [0u8; 32];
                            let n = v2::Header::error(p.xid, u32::MAX, v2::ErrorBody::BadHeader).encode(&mut e).unwrap_or(0);
                            peer.log.line(&format!(
                                "recv Version Two probe xid={:#x}: send RDMA2_ERROR / ERR_BAD_HEADER, credits {}",
                                p.xid,
                                u32::MAX
                            ));
                            if let Err(e) = c.send(&e[..n], None) {
                                peer.log.line(&format!("send failed: {e}"));
                            }
                            if let Err(e) = c.post_recv(slot) {
                                peer.log.line(&format!("repost failed: {e}"));
                            }
                            continue;
                        }
                    }
                    if let Ok(p) = v1::peek(&msg) {
                        let (low, high) = match (peer.scenario.as_str(), peer.v2) {
                            ("vers-none", _) => (3, 3),
                            (_, true) => (1, 2),
                            (_, false) => (1, 1),
                        };
                        let ours = p.vers == v1::VERSION || (p.vers == 2 && peer.v2);
                        if !ours || (peer.scenario == "vers-none" && p.vers == 2) {
                            let mut e = [0u8; 32];
                            let n = v1::encode_err_vers_any_version(&mut e, p.xid, p.vers, peer.grant(), low, high).unwrap_or(0);
                            peer.log.line(&format!("recv xid={:#x} in version {}: ERR_VERS {low}..{high}", p.xid, p.vers));
                            if let Err(e) = c.send(&e[..n], None) {
                                peer.log.line(&format!("send failed: {e}"));
                            }
                            if let Err(e) = c.post_recv(slot) {
                                peer.log.line(&format!("repost failed: {e}"));
                            }
                            continue;
                        }
                    }
                    if peer.upstream.is_some() {
                        // Repost first: the answer may take a while.
                        if let Err(e) = c.post_recv(slot) {
                            peer.log.line(&format!("repost failed: {e}"));
                        }
                        // xch-early: a Version Two server's
                        // characteristics as its first message, ahead of
                        // the answer to the client's first call (xcharext
                        // section 4.1).
                        if peer.scenario == "xch-early"
                            && peer.v2
                            && !peer.sent_initxch
                            && v1::peek(&msg).map(|p| p.vers) == Ok(2)
                        {
                            peer.log.line("ROPT_INITXCH ahead of the first reply");
                            if let Err(e) = peer.send_initxch(c) {
                                peer.log.line(&format!("xchar send failed: {e}"));
                            }
                        }
                        if let Err(e) = peer.proxy(c, &msg) {
                            // An RDMA Write may still be pending from the
                            // write area the next reply would reuse: give up
                            // the connection rather than risk serving the
                            // wrong bytes.
                            peer.log.line(&format!("proxy: {e}: disconnecting"));
                            c.disconnect();
                        }
                        if let Err(e) = peer.xch(c) {
                            peer.log.line(&format!("xchar send failed: {e}"));
                        }
                        if peer.scenario == "v2-reverse-call" && peer.v2 && !peer.done && peer.calls >= 1 {
                            peer.done = true;
                            let g = peer.grant();
                            // CB_NULL of the NFSv4 callback program, as a
                            // Version Two RDMA2_MSG in the CALL direction.
                            let cb_null = |x: u32| words(&[x, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0]);
                            let (a, b, d) = (0x7e57_2001u32, 0x7e57_2002u32, 0x7e57_2003u32);
                            let mut plain = words(&[a, 2, g, 0, 0, 0, 0, 0]);
                            plain.extend(cb_null(a));
                            let mut chunked = words(&[b, 2, g, 0, 0, 1, 0, 0x4321, 512, 0, 0x2000, 0, 0, 0]);
                            chunked.extend(cb_null(b));
                            // The header says CALL, the RPC message is a reply.
                            let mut mismatched = words(&[d, 2, g, 0, 0, 0, 0, 0]);
                            mismatched.extend(words(&[d, 1, 0, 0, 0, 0]));
                            for (x, what, m) in [(a, "plain", plain), (b, "with a Read chunk", chunked), (d, "CALL over an RPC reply", mismatched)] {
                                peer.log.line(&format!("send Version Two backward call xid={x:#x} ({what})"));
                                if let Err(e) = c.send(&m, None) {
                                    peer.log.line(&format!("send failed: {e}"));
                                }
                            }
                        }
                        if peer.scenario == "v2-optional" && peer.v2 && !peer.done && peer.calls >= 1 {
                            peer.done = true;
                            // An OPTIONAL call with no payload, of a type
                            // nobody defined (draft section 3.1).
                            let m = words(&[0x7100_0001, 2, peer.grant(), v2::RDMA2_OPTIONAL, 0, 0x7777, 4, 0xdead_beef]);
                            peer.log.line("send RDMA2_OPTIONAL call xid=0x71000001 opttype 0x7777");
                            if let Err(e) = c.send(&m, None) {
                                peer.log.line(&format!("send failed: {e}"));
                            }
                        }
                        continue;
                    }
                    if let Some(call) = parse_call(&msg, &mut peer.log) {
                        if let Err(e) = peer.answer(c, &call) {
                            peer.log.line(&format!("send failed: {e}"));
                        }
                    }
                    if let Err(e) = c.post_recv(slot) {
                        peer.log.line(&format!("repost failed: {e}"));
                    }
                }
                Ok(Some(Completion::Sent { .. })) => {}
                // Flushes (status 5) come by the dozen when a connection goes:
                // only the first of a run is logged.
                Ok(Some(Completion::Failed { status: 5, .. })) if flushed => {}
                Ok(Some(Completion::Failed { status, recv, .. })) => {
                    flushed = status == 5;
                    peer.log.line(&format!("{} completion failed: status {status}", if recv { "receive" } else { "send" }));
                }
                Ok(None) => break,
                Err(e) => {
                    peer.log.line(&format!("poll failed: {e}"));
                    break;
                }
            }
        }
    }
    peer.log.line("time is up");
    ExitCode::SUCCESS
}
