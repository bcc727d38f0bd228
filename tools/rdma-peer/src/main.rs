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
//!               [--proxy 127.0.0.1:2049]
//!
//! With `--proxy`, the peer serves real NFS instead: it passes every call on
//! to the RPC server at that address over TCP and carries the reply back
//! with RDMA, as an RPC-over-RDMA server does (see `proxy`). The scenarios
//! marked "(proxy)" need it: they aim at a mounted client's data path.
//!
//! `rdma-peer --list` prints the catalogue.

mod proxy;
mod verbs;

use std::{
    io,
    net::{SocketAddr, SocketAddrV4},
    process::ExitCode,
    time::{Duration, Instant},
};

use proxy::{CallInfo, Chunk, Upstream};
use rpcrdma_proto::{cm, v1};
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
    ("duplicate-reply", "first reply sent twice"),
    ("credits-0", "every reply grants 0 credits"),
    ("credits-max", "every reply grants 2^32-1 credits"),
    ("huge-counts", "first reply's Write list claims 2^32-1 segments"),
    ("write-chunk-unoffered", "first reply carries a Write chunk the client never offered"),
    ("reply-chunk-unoffered", "first reply is RDMA_NOMSG with a Reply chunk never offered"),
    ("inv-foreign", "first reply is Send With Invalidate of an rkey that is not the client's"),
    ("reverse-call-chunks", "after the first reply, a backward call with a Read chunk"),
    ("reverse-call", "after the first reply, a backward call (no chunks)"),
    ("disconnect-mid", "disconnect instead of answering the first call"),
    ("cm-none", "accept with no private data"),
    ("cm-garbage", "accept with 8 bytes of garbage private data"),
    ("cm-short", "accept with 3 bytes of private data"),
    ("cm-misplaced", "accept with the RFC 8797 message at offset 4 (2 KiB / 2 KiB)"),
    ("reject", "reject every connection with garbage private data"),
    ("write-chunk-long", "(proxy) first READ reply's Write chunk claims 4 KiB more than offered"),
    ("write-chunk-foreign", "(proxy) first READ reply's Write chunk names a handle never offered (no data written)"),
    ("inv-stale", "(proxy) a reply is Send With Invalidate of an earlier RPC's rkey"),
    ("inv-other-rpc", "(proxy) a reply is Send With Invalidate of another pending RPC's rkey"),
    ("extra-sends", "(proxy) after a reply, 360 copies of it back to back: more Sends than the client has Receives"),
];

/// What the peer advertises in its CM private data: its send and receive
/// sizes.
const PEER_INLINE: u32 = 4096;

const RPC_REPLY: u32 = 1;
const PROC_UNAVAIL: u32 = 3;
/// The credits the peer grants when it behaves.
const CREDITS: u32 = 8;

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
    /// Proxy mode: calls answered.
    calls: u32,
}

/// Every handle a call offered for its reply (Write chunks, Reply chunk).
fn reply_handles(c: &v1::Chunks<'_>) -> Vec<u32> {
    let mut h: Vec<u32> = c.writes.iter().flat_map(|a| a.iter()).chain(c.reply.iter().flat_map(|a| a.iter())).map(|s| s.handle).collect();
    h.dedup();
    h
}

fn remote(s: &v1::Segment, len: usize) -> Remote {
    Remote { rkey: s.handle, len: len as u32, addr: s.offset }
}

impl Peer {
    /// The private data to accept with, or `None` to reject.
    fn accept_pdata(&self) -> Option<Vec<u8>> {
        let ours = cm::PrivateData::new(PEER_INLINE, PEER_INLINE, true).to_bytes().to_vec();
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
        let credits = match self.scenario.as_str() {
            "credits-0" => 0,
            "credits-max" => u32::MAX,
            _ => CREDITS,
        };
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
            "good" | "credits-0" | "credits-max" | "cm-none" | "cm-garbage" | "cm-short" | "cm-misplaced" => good,
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
            "reverse-call-chunks" | "reverse-call" => {
                conn.send(&good, None)?;
                let bxid = 0x7e57_0001;
                let lists: &[u32] = if s == "reverse-call-chunks" {
                    &[1, 0, 0x4321, 512, 0, 0x2000, 0, 0, 0]
                } else {
                    &[0, 0, 0]
                };
                let mut m = words(&[bxid, 1, 2, 0]);
                m.extend(words(lists));
                // CB_NULL of the NFSv4 callback program.
                m.extend(words(&[bxid, 0, 2, 0x4000_0000, 1, 0, 0, 0, 0, 0]));
                self.log.line(&format!("send backward call xid={bxid:#x} ({s})"));
                m
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
    fn proxy(&mut self, conn: &mut Conn, msg: &[u8]) -> io::Result<()> {
        let handles = match v1::Header::decode_split(msg, &v1::Limits::DEFAULT) {
            Ok((h, _)) => h.body.chunks().map(reply_handles).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let s = self.scenario.clone();
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

    /// Proxy mode: passes one call on and sends its reply back; returns
    /// the RPC-over-RDMA message sent, if it was sent inline.
    fn proxy_one(&mut self, conn: &mut Conn, msg: &[u8], force_inv: Option<u32>) -> io::Result<Option<Vec<u8>>> {
        let (hdr, inline) = match v1::Header::decode_split(msg, &v1::Limits::DEFAULT) {
            Ok(h) => h,
            Err(e) => {
                self.log.line(&format!("recv undecodable header ({} bytes): {e:?}", msg.len()));
                return Ok(None);
            }
        };
        let Some(chunks) = hdr.body.chunks() else {
            self.log.line(&format!("recv xid={:#x} procedure {:?}", hdr.xid, hdr.body.procedure()));
            return Ok(None);
        };
        let xid = hdr.xid;
        let err_chunk = |conn: &mut Conn| conn.send_chain(&words(&[xid, 1, CREDITS, 4, 2]), None, &[], true);
        let mut pieces = Vec::new();
        for ch in chunks.reads.chunks() {
            let segs: Vec<Remote> = ch.segments.iter().map(|r| remote(&r.segment, r.segment.length as usize)).collect();
            pieces.push((ch.position, conn.read_remote(&segs)?));
        }
        let Some(call) = proxy::assemble(inline, &pieces) else {
            self.log.line(&format!("xid={xid:#x}: Read chunk positions do not fit the call"));
            return err_chunk(conn).map(|_| None);
        };
        let Some(info) = CallInfo::of(&call) else {
            self.log.line(&format!("recv xid={xid:#x}: not an RPC call ({} bytes)", call.len()));
            return Ok(None);
        };
        self.calls += 1;
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
        if let (Some(first), Some((at, len))) = (writes.first(), proxy::ddp_item(&info, &reply)) {
            if let Some(parts) = proxy::spread(len, first) {
                for (range, i) in parts {
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
        let max_inline = self.client.recv_size.min(PEER_INLINE) as usize;
        let wrefs: Vec<&[v1::Segment]> = returned.iter().map(|c| c.as_slice()).collect();
        let lists = v1::ChunkLists { reads: &[], writes: &wrefs, reply: None };
        let mut out = vec![0u8; 1024];
        let (sent_inline, how) = if v1::FIXED_HEADER_LEN + lists.encoded_len() + body.len() <= max_inline {
            let n = v1::encode(&mut out, xid, CREDITS, &v1::Body::Msg(lists)).map_err(|e| io::Error::other(format!("{e:?}")))?;
            out.truncate(n);
            out.extend_from_slice(&body);
            (true, if ddp { "Write chunk" } else { "inline" })
        } else if let Some(rc) = &reply_chunk {
            let Some(parts) = proxy::spread(body.len(), rc) else {
                self.log.line(&format!("xid={xid:#x}: reply of {} bytes does not fit the Reply chunk: ERR_CHUNK", body.len()));
                return err_chunk(conn).map(|_| None);
            };
            let mut rret: Chunk = rc.iter().map(|s| v1::Segment { length: 0, ..*s }).collect();
            for (range, i) in parts {
                rret[i].length = range.len() as u32;
                rdma.push((body[range.clone()].to_vec(), remote(&rc[i], range.len())));
            }
            let lists = v1::ChunkLists { reads: &[], writes: &wrefs, reply: Some(&rret) };
            let n = v1::encode(&mut out, xid, CREDITS, &v1::Body::NoMsg(lists)).map_err(|e| io::Error::other(format!("{e:?}")))?;
            out.truncate(n);
            (false, "Reply chunk")
        } else {
            self.log.line(&format!("xid={xid:#x}: reply of {} bytes fits neither inline nor a chunk: ERR_CHUNK", body.len()));
            return err_chunk(conn).map(|_| None);
        };
        // Send With Invalidate when the client can take it and offered a
        // single region for its reply (as knfsd does).
        let offered = reply_handles(chunks);
        let inv = force_inv.or(if self.client.remote_invalidate && offered.len() == 1 { offered.first().copied() } else { None });
        self.log.line(&format!(
            "xid={xid:#x} prog={} vers={} proc={}: {} reply bytes, {how}{}",
            info.prog,
            info.vers,
            info.procedure,
            reply.len(),
            inv.map(|k| format!(", invalidate {k:#x}")).unwrap_or_default()
        ));
        let wr: Vec<(&[u8], Remote)> = rdma.iter().map(|(d, r)| (d.as_slice(), *r)).collect();
        conn.send_chain(&out, inv, &wr, true)?;
        Ok(sent_inline.then_some(out))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if args.iter().any(|a| a == "--list") {
        for (name, what) in CATALOGUE {
            println!("{name:24} {what}");
        }
        return ExitCode::SUCCESS;
    }
    let (Some(listen), Some(scenario)) = (opt("--listen"), opt("--scenario")) else {
        eprintln!("usage: rdma-peer --listen ADDR:PORT --scenario NAME [--seconds N] [--proxy ADDR:PORT] | --list");
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
        calls: 0,
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
                        // One connection at a time: a new one replaces the old.
                        conn = None;
                        match peer.accept_pdata() {
                            None => {
                                let r = ev.id.reject(&[0xff, 0xee, 0xdd]);
                                peer.log.line(&format!("rejected: {r:?}"));
                            }
                            Some(pdata) => match Conn::accept(ev.id, &pdata, ev.responder_resources) {
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
        let mut flushed = false;
        loop {
            match c.poll() {
                Ok(Some(Completion::Recv { slot, len })) => {
                    let msg = c.received(slot, len).to_vec();
                    if peer.upstream.is_some() {
                        // Repost first: the answer may take a while.
                        if let Err(e) = c.post_recv(slot) {
                            peer.log.line(&format!("repost failed: {e}"));
                        }
                        if let Err(e) = peer.proxy(c, &msg) {
                            peer.log.line(&format!("proxy: {e}"));
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
