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
//!
//! `rdma-peer --list` prints the catalogue.

mod verbs;

use std::{
    net::SocketAddrV4,
    process::ExitCode,
    time::{Duration, Instant},
};

use rpcrdma_proto::{cm, v1};
use verbs::{Completion, Conn, Listener};

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
];

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
}

impl Peer {
    /// The private data to accept with, or `None` to reject.
    fn accept_pdata(&self) -> Option<Vec<u8>> {
        let ours = cm::PrivateData::new(4096, 4096, true).to_bytes().to_vec();
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
            return conn.send(&good, None, None);
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
                conn.send(&good, None, None)?;
                good
            }
            "huge-counts" => words(&[xid, 1, credits, 0, 0, 1, u32::MAX]),
            "write-chunk-unoffered" => with(&[xid, 1, credits, 0, 0, 1, 1, 0x1234, 4096, 0, 0x1000, 0, 0]),
            "reply-chunk-unoffered" => words(&[xid, 1, credits, 1, 0, 0, 1, 1, 0x1234, 4096, 0, 0x1000]),
            "inv-foreign" => {
                let rkey = conn.own_rkey();
                self.log.line(&format!("send reply xid={xid:#x} with invalidate of rkey {rkey:#x} (ours)"));
                return conn.send(&good, Some(rkey), None);
            }
            "reverse-call-chunks" | "reverse-call" => {
                conn.send(&good, None, None)?;
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
        conn.send(&msg, None, None)
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
        eprintln!("usage: rdma-peer --listen ADDR:PORT --scenario NAME [--seconds N] | --list");
        return ExitCode::from(2);
    };
    let Ok(addr) = listen.parse::<SocketAddrV4>() else {
        eprintln!("rdma-peer: bad address {listen}");
        return ExitCode::from(2);
    };
    let seconds: u64 = opt("--seconds").and_then(|s| s.parse().ok()).unwrap_or(120);
    let mut peer = Peer { scenario, log: Log { start: Instant::now() }, conns: 0, done: false };
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
                    if let Some(call) = parse_call(&msg, &mut peer.log) {
                        if let Err(e) = peer.answer(c, &call) {
                            peer.log.line(&format!("send failed: {e}"));
                        }
                    }
                    if let Err(e) = c.post_recv(slot) {
                        peer.log.line(&format!("repost failed: {e}"));
                    }
                }
                Ok(Some(Completion::Sent)) => {}
                // Flushes (status 5) come by the dozen when a connection goes:
                // only the first of a run is logged.
                Ok(Some(Completion::Failed { status: 5, .. })) if flushed => {}
                Ok(Some(Completion::Failed { status, recv })) => {
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
