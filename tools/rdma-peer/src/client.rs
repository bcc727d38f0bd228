// SPDX-License-Identifier: GPL-2.0
//! The hostile *client*: connects to an RPC-over-RDMA server, sends what
//! a scenario says (bad chunk lists, versions, OPTIONAL messages, junk
//! private data, a connection lost while the server reads a call) and
//! checks the server's answer against what the specs require of it. The
//! RPC is always the NFSv3 NULL procedure, which knfsd answers with
//! nothing but success; after each hostile message the scenario checks
//! that the connection, or a new one, still carries a good call.
//!
//!     rdma-peer --connect 198.18.0.1:20049 --scenario c-NAME
//!
//! prints one line per event and ends with `PASS c-NAME` (exit 0) or
//! `FAIL c-NAME: why` (exit 1). Documentation/hostile-peer.rst has the
//! catalogue.

use std::{
    net::SocketAddrV4,
    time::{Duration, Instant},
};

use rpcrdma_proto::{
    cm, v1, v2,
    xchar::{self, XchOp, Xchar, XcharSpec, XcharSubset},
};

use crate::{
    verbs::{Completion, Conn, Remote},
    Log,
};

/// The hostile client's scenarios, for `--list`.
pub const CATALOGUE: &[(&str, &str)] = &[
    ("c-null", "a NULL call inline in Version One: answered with its XID, credits granted, by plain Send"),
    ("c-v2-null", "a NULL call in Version Two: answered in Version Two, direction REPLY, credits granted"),
    ("c-bad-vers", "a call with rdma_vers 7: ERR_VERS naming the versions served; the connection stays"),
    ("c-misaligned-read", "a Read chunk at an unaligned position: ERR_CHUNK; the connection stays"),
    ("c-read-beyond", "a Read chunk past the end of the call: ERR_CHUNK; the connection stays"),
    ("c-read-order", "two Read chunks out of position order: ERR_CHUNK; the connection stays"),
    ("c-nomsg-no-read", "RDMA_NOMSG without a Read chunk: ERR_CHUNK; the connection stays"),
    ("c-bad-lists", "chunk lists that do not decode (a Write list's count of 2^31): ERR_CHUNK; the connection stays"),
    ("c-v2-bad-lists", "the same in Version Two: ERR_BAD_HEADER; the connection stays"),
    ("c-v2-optional", "an RDMA2_OPTIONAL of an unknown type: ERR_INVAL_OPTION with its XID"),
    ("c-v2-reqxch", "ROPT_REQXCH for the server's Receive size and another: ROPT_RESPXCH, done and rejected"),
    ("c-v2-respxch", "an ROPT_RESPXCH nobody asked for: ERR_INVAL_OPTION"),
    ("c-v2-no-reminv", "Version Two, Requester Remote Invalidation false: a call with one handle answered by plain Send"),
    ("c-v1-no-reminv", "Version One without the RFC 8797 R flag: a call with one handle answered by plain Send"),
    ("c-junk-pdata", "junk CM private data: ignored, the connection carries calls"),
    ("c-long-call", "a Long Call (RDMA_NOMSG, the NULL call in a position-zero Read chunk): answered"),
    ("c-long-inline", "a NULL call with 1200 bytes inline and a Read chunk after them: pulled and answered"),
    ("c-two-items", "a NULL call with two Read chunks of 5 and 7 bytes at their positions inline: pulled, placed and answered"),
    ("c-drop-during-read", "a Long Call of 1 MiB, the connection gone at once: the server lets go, a new connection works"),
    ("c-short-write", "an NFSv4 READ of 8 KiB with an 8 KiB Write chunk (the file's bytes placed), then with one of 1000 bytes: the READ fails, no byte past the chunk written; the connection carries calls"),
    ("c-credit-overrun", "twice the granted credits of NULL calls sent at once: each answered, the connection kept"),
    ("c-connect-storm", "32 connections opened at once, a NULL call on each, all dropped together: a new connection works"),
    ("c-stray-bc-reply", "8 replies to backward calls never made, in Version One and in Two: dropped unanswered; the connection carries calls"),
];

/// NFS's RPC program and version the calls name.
const NFS_PROGRAM: u32 = 100003;
const NFS_V3: u32 = 3;

/// Replies to backward calls never made that `c-stray-bc-reply` sends in
/// each version.
const STRAY_BC_REPLIES: u32 = 8;

/// NFSv4.0's COMPOUND and the operations of `read_call`.
const NFS_V4: u32 = 4;
const NFSPROC4_COMPOUND: u32 = 1;
const OP_LOOKUP: u32 = 15;
const OP_PUTROOTFH: u32 = 24;
const OP_READ: u32 = 25;
const AUTH_SYS: u32 = 1;

/// The file c-short-write reads, at the root of the server's export, and
/// its length: the test makes it with `rdma-peer --pattern 16384`.
const READ_FILE: &str = "hostile-read";
const READ_FILE_LEN: usize = 16384;

/// Byte `i` of the file c-short-write reads.
pub fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// What c-short-write puts where the server must not write.
const CANARY: u8 = 0xa5;

/// The most calls c-credit-overrun sends (twice the grant, up to this).
const CREDIT_OVERRUN_MAX: u32 = 256;

/// Connections c-connect-storm opens at once.
const STORM: usize = 32;

/// How long an answer may take.
const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// The NULL call with XID `xid` (AUTH_NONE): 40 bytes.
fn null_call(xid: u32) -> Vec<u8> {
    [xid, 0, 2, NFS_PROGRAM, NFS_V3, 0, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// An NFSv4.0 COMPOUND (AUTH_SYS as root): PUTROOTFH, LOOKUP of
/// [`READ_FILE`], READ of `count` bytes at offset 0 with the anonymous
/// stateid.
fn read_call(xid: u32, count: u32) -> Vec<u8> {
    let name = READ_FILE.as_bytes();
    let mut w = vec![xid, 0, 2, NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND];
    // The credential: stamp, machine name "peer", uid 0, gid 0, no
    // groups; the verifier AUTH_NONE.
    w.extend([AUTH_SYS, 24, 0, 4, u32::from_be_bytes(*b"peer"), 0, 0, 0, 0, 0]);
    // No tag, minor version 0, three operations.
    w.extend([0, 0, 3, OP_PUTROOTFH, OP_LOOKUP, name.len() as u32]);
    let mut m: Vec<u8> = w.iter().flat_map(|x| x.to_be_bytes()).collect();
    m.extend_from_slice(name);
    m.resize(m.len().next_multiple_of(4), 0);
    // The anonymous stateid (all zeroes), offset 0, count.
    m.extend([OP_READ, 0, 0, 0, 0, 0, 0, count].iter().flat_map(|x| x.to_be_bytes()));
    m
}

/// The READ's outcome in a COMPOUND reply to [`read_call`]: the status of
/// the COMPOUND, and for a READ done, the length of its data (which went
/// to the Write chunk: only the length is inline).
fn read_result(rpc: &[u8]) -> Result<(u32, Option<u32>), String> {
    let w = |i: usize| rpc.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    // xid, REPLY, MSG_ACCEPTED, the verifier (flavour, length, body).
    let vlen = w(4).ok_or("a short RPC reply")?;
    let at = 5 + vlen.div_ceil(4) as usize;
    if (w(1), w(2), w(at)) != (Some(1), Some(0), Some(0)) {
        return Err(format!("not an accepted, successful RPC reply: {}", hex(rpc)));
    }
    // COMPOUND4res: status, tag (empty: we sent none), results.
    let status = w(at + 1).ok_or("no COMPOUND status")?;
    let taglen = w(at + 2).ok_or("no tag")?;
    let mut i = at + 3 + taglen.div_ceil(4) as usize;
    let n = w(i).ok_or("no result count")?;
    i += 1;
    for _ in 0..n {
        let (op, st) = (w(i).ok_or("a short result")?, w(i + 1).ok_or("a short result")?);
        i += 2;
        if op == OP_READ && st == 0 {
            // eof, then the data's length.
            return Ok((status, Some(w(i + 1).ok_or("no READ length")?)));
        }
        if st != 0 {
            break;
        }
    }
    Ok((status, None))
}

/// Checks the reply to the Version Two NULL call `xid` word by word
/// against the draft's XDR, without the decoder the server shares with
/// us: `rpcrdma2_hdr_prefix` (the XID, `rdma_vers` 2, a grant above 0),
/// `rdma_htype` RDMA2_MSG (0); `rpcrdma2_chunk_lists`: the direction
/// REPLY (1), no Read list, no Write list, no Reply chunk; then the RPC
/// reply: the XID, REPLY, MSG_ACCEPTED, an AUTH_NONE verifier of no
/// bytes, SUCCESS.
fn v2_null_reply_words(bytes: &[u8], xid: u32) -> Result<(), String> {
    let got: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])).collect();
    let want = [Some(xid), Some(2), None, Some(0), Some(1), Some(0), Some(0), Some(0), Some(xid), Some(1), Some(0), Some(0), Some(0), Some(0)];
    let same = bytes.len() == 4 * want.len() && got.iter().zip(want).all(|(&g, w)| w.is_none_or(|w| w == g));
    if !same || got.get(2).is_none_or(|&c| c == 0) {
        return Err(format!("the Version Two NULL reply is not the draft's: {}", hex(bytes)));
    }
    Ok(())
}

/// A message the server sent.
struct Answer {
    bytes: Vec<u8>,
    invalidated: Option<u32>,
}

/// The client's side of one connection.
struct Client {
    conn: Conn,
    log: Log,
    xid: u32,
    /// The server's ROPT_INITXCH, once it came (a Version Two server
    /// sends it when it likes: [`Client::answer`] sets it aside).
    initxch: Option<Vec<u8>>,
}

impl Client {
    fn connect(addr: SocketAddrV4, pdata: &[u8], log: Log) -> Result<Client, String> {
        let conn = Conn::connect(addr, pdata, log).map_err(|e| format!("cannot connect: {e}"))?;
        let mut log = log;
        log.line(&format!("connected to {addr}"));
        Ok(Client { conn, log, xid: 0x5a00_0000, initxch: None })
    }

    /// Our RFC 8797 private data: 4 KiB each way, remote invalidation as
    /// `inv` says.
    fn pdata(inv: bool) -> Vec<u8> {
        cm::PrivateData::new(4096, 4096, inv).to_bytes().to_vec()
    }

    fn next_xid(&mut self) -> u32 {
        self.xid = self.xid.wrapping_add(1);
        self.xid
    }

    fn send(&mut self, what: &str, msg: &[u8]) -> Result<(), String> {
        self.log.line(&format!("send {what} ({} bytes)", msg.len()));
        self.conn.send(msg, None).map_err(|e| format!("cannot send {what}: {e}"))
    }

    /// The next message from the server, within [`ANSWER_WAIT`]; the
    /// server's ROPT_INITXCH is set aside in [`Client::initxch`].
    fn answer(&mut self, what: &str) -> Result<Answer, String> {
        loop {
            let a = self.next_message(what)?;
            let initxch = match v2::Header::decode(&a.bytes) {
                Ok((v2::Header { body: v2::Body::Optional(o), .. }, _)) => o.opttype == xchar::ROPT_INITXCH,
                _ => false,
            };
            if !initxch {
                return Ok(a);
            }
            self.log.line("the server's ROPT_INITXCH, set aside");
            self.initxch = Some(a.bytes);
        }
    }

    /// Sends the call `m` (XID `xid`, `what`) and checks that the answer
    /// is its reply: RDMA_MSG, the same XID, the RPC reply after it.
    fn call_answered(&mut self, what: &str, xid: u32, m: &[u8]) -> Result<(), String> {
        self.send(what, m)?;
        let a = self.answer(&format!("the reply to {what}"))?;
        let (h, rpc) = v1::Header::decode_split(&a.bytes, &v1::Limits::DEFAULT).map_err(|e| format!("the reply: {e:?}"))?;
        if h.xid != xid || !matches!(h.body, v1::Body::Msg(_)) || rpc.get(..4) != Some(&xid.to_be_bytes()[..]) {
            return Err(format!("the answer to {what} is not its reply: {:?}", h.body));
        }
        self.log.line(&format!("{what}: answered"));
        Ok(())
    }

    /// The server's ROPT_INITXCH: the one set aside, or the next message.
    fn their_initxch(&mut self) -> Result<Vec<u8>, String> {
        match self.initxch.take() {
            Some(b) => Ok(b),
            None => self.next_message("the server's ROPT_INITXCH").map(|a| a.bytes),
        }
    }

    /// The next message from the server, within [`ANSWER_WAIT`].
    fn next_message(&mut self, what: &str) -> Result<Answer, String> {
        let deadline = Instant::now() + ANSWER_WAIT;
        while Instant::now() < deadline {
            match self.conn.poll().map_err(|e| format!("polling: {e}"))? {
                Some(Completion::Recv { slot, len, invalidated }) => {
                    let bytes = self.conn.received(slot, len).to_vec();
                    self.conn.post_recv(slot).map_err(|e| format!("reposting a Receive: {e}"))?;
                    self.log.line(&format!(
                        "recv {len} bytes{}: {}",
                        invalidated.map(|k| format!(" (Send With Invalidate of {k:#x})")).unwrap_or_default(),
                        hex(&bytes[..bytes.len().min(48)])
                    ));
                    return Ok(Answer { bytes, invalidated });
                }
                Some(Completion::Failed { status, recv, .. }) => {
                    return Err(format!("{what}: a {} failed with status {status}", if recv { "Receive" } else { "Send" }))
                }
                Some(Completion::Sent { .. }) => {}
                None => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        Err(format!("{what}: no answer in {} s", ANSWER_WAIT.as_secs()))
    }

    /// A NULL call in Version One (`v2`: Two), with `chunks`; checks the
    /// answer is its reply: the XID, credits granted, an accepted RPC
    /// reply. Returns the answer.
    fn null(&mut self, v2: bool, chunks: v1::ChunkLists<'_>) -> Result<Answer, String> {
        let xid = self.next_xid();
        let mut m = vec![0u8; 1024];
        let n = encode(&mut m, v2, xid, false, chunks)?;
        m.truncate(n);
        m.extend_from_slice(&null_call(xid));
        self.send(&format!("NULL xid={xid:#x} v{}", if v2 { 2 } else { 1 }), &m)?;
        let a = self.answer("the NULL call's reply")?;
        let (hxid, credits, rpc) = if v2 {
            let (h, rpc) = v2::Header::decode(&a.bytes).map_err(|e| format!("the reply's Version Two header: {e:?}"))?;
            match h.body {
                v2::Body::Msg(c) if c.direction == v2::Direction::Reply => {}
                other => return Err(format!("not an RDMA2_MSG reply: {other:?}")),
            }
            (h.xid, h.credit, rpc.to_vec())
        } else {
            let (h, rpc) = v1::Header::decode_split(&a.bytes, &v1::Limits::DEFAULT)
                .map_err(|e| format!("the reply's Version One header: {e:?}"))?;
            if !matches!(h.body, v1::Body::Msg(_)) {
                return Err(format!("not an RDMA_MSG reply: {:?}", h.body));
            }
            (h.xid, h.credits, rpc.to_vec())
        };
        if hxid != xid {
            return Err(format!("reply for xid {hxid:#x}, not {xid:#x}"));
        }
        // A grant in every reply, never zero (RFC 8166 section 3.3.1).
        if credits == 0 {
            return Err("the reply grants no credit".into());
        }
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS.
        let want: Vec<u8> = [xid, 1, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
        if rpc.get(..24) != Some(&want[..]) {
            return Err(format!("the RPC reply is not NULL's success: {}", hex(&rpc)));
        }
        self.log.line(&format!("NULL xid={xid:#x} answered, {credits} credits"));
        Ok(a)
    }

    /// Sends `msg` (a hostile call `xid`) and checks the answer is the
    /// RDMA_ERROR `want` with that XID, then that a NULL call still works
    /// on the connection (in the same version).
    fn expect_error(&mut self, what: &str, xid: u32, msg: &[u8], want: Want, v2: bool) -> Result<(), String> {
        self.send(what, msg)?;
        let a = self.answer(what)?;
        // Both versions' RDMA_ERROR: the prefix, the code, ERR_VERS's range.
        let p = v1::peek(&a.bytes).map_err(|e| format!("{what}: no header: {e:?}"))?;
        let word = |i: usize| a.bytes.get(i * 4..i * 4 + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        if p.procedure != v1::RDMA_ERROR {
            return Err(format!("{what}: not an RDMA_ERROR: procedure {}", p.procedure));
        }
        if p.xid != xid {
            return Err(format!("{what}: RDMA_ERROR for xid {:#x}, not {xid:#x}", p.xid));
        }
        let code = word(4);
        let ok = match want {
            Want::Chunk => code == Some(v1::ERR_CHUNK) && p.vers == 1,
            Want::BadHeader => code == Some(v2::RDMA2_ERR_BAD_HEADER) && p.vers == 2,
            Want::InvalOption => code == Some(v2::RDMA2_ERR_INVAL_OPTION) && p.vers == 2,
            Want::Vers(low, high) => code == Some(v1::ERR_VERS) && (word(5), word(6)) == (Some(low), Some(high)),
        };
        if !ok {
            return Err(format!("{what}: expected {want:?}, got version {} code {code:?} ({})", p.vers, hex(&a.bytes)));
        }
        self.log.line(&format!("{what}: {want:?} as required"));
        self.null(v2, v1::ChunkLists::NONE).map(|_| ()).map_err(|e| format!("after {what}, the connection: {e}"))
    }
}

/// How the server answered a [`read_call`].
#[derive(Debug)]
enum Reply {
    /// An RDMA_ERROR.
    Error(v1::ErrorBody),
    /// An RPC reply: the COMPOUND's status, the READ's length if it was
    /// done, the bytes the Write chunk came back with.
    Read { status: u32, len: Option<u32>, written: u32 },
}

impl Client {
    /// An NFSv4 READ of `count` bytes offering a Write chunk of `chunk`
    /// bytes, after filling the area with [`CANARY`]: the answer, and
    /// the area as the server left it ([`READ_FILE_LEN`] bytes).
    fn read_into(&mut self, chunk: u32, count: u32) -> Result<(Reply, Vec<u8>), String> {
        self.conn.write_area(READ_FILE_LEN).fill(CANARY);
        let w = [seg(self.conn.writable(chunk))];
        let writes = [&w[..]];
        let xid = self.next_xid();
        let mut m = vec![0u8; 1024];
        let n = encode(&mut m, false, xid, false, v1::ChunkLists { reads: &[], writes: &writes, reply: None })?;
        m.truncate(n);
        m.extend(read_call(xid, count));
        self.send(&format!("READ xid={xid:#x} of {count} bytes, a Write chunk of {chunk}"), &m)?;
        let a = self.answer("the READ's reply")?;
        let area = self.conn.write_area(READ_FILE_LEN).to_vec();
        let (h, rpc) = v1::Header::decode_split(&a.bytes, &v1::Limits::DEFAULT)
            .map_err(|e| format!("the READ's reply header: {e:?}"))?;
        if h.xid != xid {
            return Err(format!("an answer for xid {:#x}, not {xid:#x}", h.xid));
        }
        let c = match h.body {
            v1::Body::Msg(c) => c,
            v1::Body::Error(e) => return Ok((Reply::Error(e), area)),
            other => return Err(format!("the READ's reply is {:?}", other.procedure())),
        };
        let mut chunks = c.writes.iter();
        let written = match (chunks.next(), chunks.next()) {
            (Some(segs), None) if segs.len() == 1 => segs.get(0).map(|s| s.length).unwrap_or(0),
            _ => return Err("the reply does not return the one Write chunk of one segment offered".into()),
        };
        if written > chunk {
            return Err(format!("the reply says {written} bytes were written into a chunk of {chunk}"));
        }
        let (status, len) = read_result(rpc)?;
        if len.is_some_and(|l| l != written) {
            return Err(format!("the READ returned {len:?} bytes, the Write chunk {written}"));
        }
        Ok((Reply::Read { status, len, written }, area))
    }
}

/// An RDMA_ERROR a scenario expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    Chunk,
    BadHeader,
    InvalOption,
    Vers(u32, u32),
}

/// Encodes an RDMA_MSG (`nomsg`: RDMA_NOMSG) call header with `chunks`
/// in Version One or (`v2`) Two, asking for 32 credits.
fn encode(out: &mut [u8], v2: bool, xid: u32, nomsg: bool, chunks: v1::ChunkLists<'_>) -> Result<usize, String> {
    if v2 {
        let c = v2::Chunks { direction: v2::Direction::Call, lists: chunks };
        let body = if nomsg { v2::Body::NoMsg(c) } else { v2::Body::Msg(c) };
        v2::Header { xid, credit: 32, body }.encode(out).map_err(|e| format!("{e:?}"))
    } else if nomsg {
        v1::encode_nomsg(out, xid, 32, &chunks).map_err(|e| format!("{e:?}"))
    } else {
        v1::encode_msg(out, xid, 32, &chunks).map_err(|e| format!("{e:?}"))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn seg(r: Remote) -> v1::Segment {
    v1::Segment { handle: r.rkey, length: r.len, offset: r.addr }
}

/// A hostile call: a NULL call's header with `chunks` as the scenario
/// shapes them, the call after it (`inline`), with XID `xid`.
fn call_with(v2: bool, xid: u32, nomsg: bool, chunks: v1::ChunkLists<'_>, inline: bool) -> Result<Vec<u8>, String> {
    let mut m = vec![0u8; 1024];
    let n = encode(&mut m, v2, xid, nomsg, chunks)?;
    m.truncate(n);
    if inline {
        m.extend_from_slice(&null_call(xid));
    }
    Ok(m)
}

/// Runs `scenario` against the server at `addr`: `Ok` if the server did
/// what the specs require, else why not.
pub fn run(addr: SocketAddrV4, scenario: &str, log: Log) -> Result<(), String> {
    let pd = Client::pdata(false);
    match scenario {
        "c-null" | "c-v1-no-reminv" => {
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE)?;
            // A Reply chunk it need not use: one handle, but no R flag in
            // our private data, so no Send With Invalidate.
            let reply = [seg(c.conn.writable(4096))];
            let a = c.null(false, v1::ChunkLists { reads: &[], writes: &[], reply: Some(&reply) })?;
            if let Some(k) = a.invalidated {
                return Err(format!("the server invalidated {k:#x} though we never offered Send With Invalidate"));
            }
            Ok(())
        }
        "c-v2-null" => {
            let mut c = Client::connect(addr, &pd, log)?;
            let a = c.null(true, v1::ChunkLists::NONE)?;
            v2_null_reply_words(&a.bytes, c.xid)?;
            c.log.line("the reply is word for word what the draft's XDR says");
            c.null(true, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-bad-vers" => {
            let mut c = Client::connect(addr, &pd, log)?;
            let xid = c.next_xid();
            let mut m = call_with(false, xid, false, v1::ChunkLists::NONE, true)?;
            m[4..8].copy_from_slice(&7u32.to_be_bytes());
            c.expect_error("a call with rdma_vers 7", xid, &m, Want::Vers(1, 2), false)
        }
        "c-misaligned-read" | "c-read-beyond" | "c-read-order" => {
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE)?;
            let r = seg(c.conn.readable(&[0u8; 64]).map_err(|e| e.to_string())?);
            let half = v1::Segment { length: 32, ..r };
            let reads = match scenario {
                "c-misaligned-read" => vec![v1::ReadSegment { position: 38, segment: r }],
                "c-read-beyond" => vec![v1::ReadSegment { position: 4096, segment: r }],
                _ => vec![
                    v1::ReadSegment { position: 36, segment: half },
                    v1::ReadSegment { position: 8, segment: half },
                ],
            };
            let xid = c.next_xid();
            let m = call_with(false, xid, false, v1::ChunkLists { reads: &reads, writes: &[], reply: None }, true)?;
            c.expect_error(scenario, xid, &m, Want::Chunk, false)
        }
        "c-nomsg-no-read" => {
            let mut c = Client::connect(addr, &pd, log)?;
            let xid = c.next_xid();
            let m = call_with(false, xid, true, v1::ChunkLists::NONE, false)?;
            c.expect_error("RDMA_NOMSG without a Read chunk", xid, &m, Want::Chunk, false)
        }
        "c-bad-lists" | "c-v2-bad-lists" => {
            let v2 = scenario == "c-v2-bad-lists";
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(v2, v1::ChunkLists::NONE)?;
            let xid = c.next_xid();
            // Empty Read list, then a Write list entry claiming 2^31
            // segments, with the call after it.
            let mut m: Vec<u8> = [xid, if v2 { 2 } else { 1 }, 32, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
            if v2 {
                m.extend_from_slice(&0u32.to_be_bytes());
            }
            for w in [0u32, 1, 0x8000_0000] {
                m.extend_from_slice(&w.to_be_bytes());
            }
            m.extend_from_slice(&null_call(xid));
            c.expect_error(scenario, xid, &m, if v2 { Want::BadHeader } else { Want::Chunk }, v2)
        }
        "c-v2-optional" | "c-v2-respxch" => {
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(true, v1::ChunkLists::NONE)?;
            let xid = c.next_xid();
            let mut m = vec![0u8; 256];
            let n = if scenario == "c-v2-optional" {
                let o = v2::Optional { direction: v2::Direction::Call, opttype: 0x7777, optinfo: &[1, 2, 3, 4] };
                v2::Header { xid, credit: 32, body: v2::Body::<v1::ChunkLists<'_>>::Optional(o) }
                    .encode(&mut m)
                    .map_err(|e| format!("{e:?}"))?
            } else {
                let none = XcharSubset::empty();
                XchOp::RespXch { done: none, rej: none, pend: none }
                    .encode_message(xid, 32, v2::Direction::Call, &mut m)
                    .map_err(|e| format!("{e:?}"))?
            };
            m.truncate(n);
            c.expect_error(scenario, xid, &m, Want::InvalOption, true)
        }
        "c-v2-reqxch" => {
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(true, v1::ChunkLists::NONE)?;
            // The server's own ROPT_INITXCH follows its first reply.
            let init = c.their_initxch()?;
            let theirs = match v2::Header::decode(&init) {
                Ok((v2::Header { body: v2::Body::Optional(o), .. }, _)) => XchOp::from_optional(&o).map_err(|e| format!("{e:?}"))?,
                other => return Err(format!("expected the server's ROPT_INITXCH, got {other:?}")),
            };
            let XchOp::InitXch { start, .. } = theirs else { return Err(format!("expected ROPT_INITXCH, got {theirs:?}")) };
            let rbsiz = start.iter().find_map(|x| if let Xchar::RecvBufSize(n) = x { Some(n) } else { None });
            let Some(rbsiz) = rbsiz else { return Err("the server's ROPT_INITXCH has no Receive Buffer Size".into()) };
            let xid = c.next_xid();
            let want = [Xchar::RecvBufSize(rbsiz), Xchar::RecvBufSize(rbsiz + 4096)];
            let mut m = vec![0u8; 256];
            let n = XchOp::ReqXch { want: XcharSpec::from_slice(&want) }
                .encode_message(xid, 32, v2::Direction::Call, &mut m)
                .map_err(|e| format!("{e:?}"))?;
            m.truncate(n);
            c.send("ROPT_REQXCH", &m)?;
            let a = c.answer("ROPT_RESPXCH")?;
            let (h, _) = v2::Header::decode(&a.bytes).map_err(|e| format!("the answer: {e:?}"))?;
            let v2::Body::Optional(o) = h.body else { return Err(format!("the answer is not OPTIONAL: {:?}", h.body)) };
            let op = XchOp::from_optional(&o).map_err(|e| format!("the answer: {e:?}"))?;
            let XchOp::RespXch { done, rej, pend } = op else { return Err(format!("the answer is {op:?}")) };
            if h.xid != xid || o.direction != v2::Direction::Reply {
                return Err(format!("ROPT_RESPXCH with xid {:#x}, direction {:?}", h.xid, o.direction));
            }
            if !(done.contains(0) && !done.contains(1) && rej.contains(1) && !rej.contains(0) && !pend.contains(0) && !pend.contains(1)) {
                return Err(format!("ROPT_RESPXCH says done {done:?}, rejected {rej:?}, pending {pend:?}"));
            }
            c.log.line("ROPT_RESPXCH: the size it has done, another rejected");
            Ok(())
        }
        "c-v2-no-reminv" => {
            // RFC 8797's R flag set, but on Version Two the characteristic
            // governs: false (said, and the default).
            let mut c = Client::connect(addr, &Client::pdata(true), log)?;
            c.null(true, v1::ChunkLists::NONE)?;
            let xid = c.next_xid() | 0x8000_0000;
            let vals = [Xchar::RecvBufSize(4096), Xchar::ReqRemInv(false)];
            let mut m = vec![0u8; 256];
            let n = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::empty() }
                .encode_message(xid, 32, v2::Direction::Call, &mut m)
                .map_err(|e| format!("{e:?}"))?;
            m.truncate(n);
            c.send("ROPT_INITXCH (Requester Remote Invalidation false)", &m)?;
            let reply = [seg(c.conn.writable(4096))];
            for _ in 0..3 {
                let a = c.null(true, v1::ChunkLists { reads: &[], writes: &[], reply: Some(&reply) })?;
                if let Some(k) = a.invalidated {
                    return Err(format!("the server invalidated {k:#x} though our characteristic says false"));
                }
            }
            Ok(())
        }
        "c-junk-pdata" => {
            let junk: Vec<u8> = (0..56u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
            let mut c = Client::connect(addr, &junk, log)?;
            c.null(false, v1::ChunkLists::NONE)?;
            c.null(false, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-long-call" => {
            let mut c = Client::connect(addr, &pd, log)?;
            let xid = c.next_xid();
            let r = seg(c.conn.readable(&null_call(xid)).map_err(|e| e.to_string())?);
            let reads = [v1::ReadSegment { position: 0, segment: r }];
            let m = call_with(false, xid, true, v1::ChunkLists { reads: &reads, writes: &[], reply: None }, false)?;
            c.call_answered("a Long Call", xid, &m)
        }
        "c-long-inline" => {
            // More inline bytes before a Read chunk than the server keeps
            // in place (512): the NULL call, then zeros it ignores, then
            // 64 bytes pulled.
            let mut c = Client::connect(addr, &pd, log)?;
            let xid = c.next_xid();
            let mut call = null_call(xid);
            call.resize(1200, 0);
            let r = seg(c.conn.readable(&[0u8; 64]).map_err(|e| e.to_string())?);
            let reads = [v1::ReadSegment { position: 1200, segment: r }];
            let mut m = call_with(false, xid, false, v1::ChunkLists { reads: &reads, writes: &[], reply: None }, false)?;
            m.extend_from_slice(&call);
            c.call_answered("a NULL call with 1200 bytes inline and a Read chunk", xid, &m)
        }
        "c-two-items" => {
            // Two data items in one call, each with its roundup: the call
            // rebuilt from seven pieces (more than a WRITE's, which the
            // server keeps in place). The NULL call's arguments are
            // ignored.
            let mut c = Client::connect(addr, &pd, log)?;
            let xid = c.next_xid();
            let mut call = null_call(xid);
            call.resize(100, 0);
            // Both in the one area the client lends for reading.
            let both = seg(c.conn.readable(&[0xa5, 0xa5, 0xa5, 0xa5, 0xa5, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a]).map_err(|e| e.to_string())?);
            let a = v1::Segment { length: 5, ..both };
            let b = v1::Segment { length: 7, offset: both.offset + 5, ..both };
            let reads = [v1::ReadSegment { position: 40, segment: a }, v1::ReadSegment { position: 60, segment: b }];
            let mut m = call_with(false, xid, false, v1::ChunkLists { reads: &reads, writes: &[], reply: None }, false)?;
            m.extend_from_slice(&call);
            c.call_answered("a NULL call with two Read chunks", xid, &m)
        }
        "c-drop-during-read" => {
            {
                let mut c = Client::connect(addr, &pd, log)?;
                let xid = c.next_xid();
                // 1 MiB of call: the NULL call, then zeros (the server
                // pulls it all before it can tell).
                let mut call = null_call(xid);
                call.resize(1 << 20, 0);
                let r = seg(c.conn.readable(&call).map_err(|e| e.to_string())?);
                let reads = [v1::ReadSegment { position: 0, segment: r }];
                let m = call_with(false, xid, true, v1::ChunkLists { reads: &reads, writes: &[], reply: None }, false)?;
                c.send("a Long Call of 1 MiB", &m)?;
                c.conn.disconnect();
                let mut l = log;
                l.line("disconnected at once, and gone");
            }
            std::thread::sleep(Duration::from_secs(2));
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-short-write" => {
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE)?;
            // First a Write chunk large enough: the file's bytes land in
            // it (the file is there, and placing works).
            let (got, data) = c.read_into(8192, 8192)?;
            match got {
                Reply::Read { status: 0, len: Some(8192), written: 8192 } => {}
                other => return Err(format!("a READ of 8192 bytes into a chunk of 8192: {other:?}")),
            }
            let (placed, past) = data.split_at(8192);
            if let Some(i) = placed.iter().enumerate().position(|(i, &b)| b != pattern(i)) {
                return Err(format!("the READ placed a wrong byte at {i}: {:#04x}, not {:#04x}", placed[i], pattern(i)));
            }
            if past.iter().any(|&b| b != CANARY) {
                return Err("the server wrote past the Write chunk's 8192 bytes".into());
            }
            c.log.line("8192 bytes placed in the Write chunk, the file's own");
            // Then one of 1000 bytes for the same READ.
            let (got, data) = c.read_into(1000, 8192)?;
            if let Some(i) = data.iter().skip(1000).position(|&b| b != CANARY) {
                return Err(format!("the server wrote past the Write chunk's 1000 bytes, at byte {}", 1000 + i));
            }
            match got {
                Reply::Error(v1::ErrorBody::Chunk) => c.log.line("ERR_CHUNK"),
                Reply::Read { status, len: None, written: 0 } if status != 0 => {
                    c.log.line(&format!("the READ failed with NFS status {status}, nothing written"))
                }
                other => return Err(format!("a READ of 8192 bytes into a chunk of 1000: {other:?}")),
            }
            c.null(false, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-credit-overrun" => {
            let mut c = Client::connect(addr, &pd, log)?;
            let a = c.null(false, v1::ChunkLists::NONE)?;
            let granted = v1::peek(&a.bytes).map(|p| p.credits).unwrap_or(0);
            let n = (2 * granted).min(CREDIT_OVERRUN_MAX);
            let first = c.xid.wrapping_add(1);
            // Each Send waited for (the slots are few), none of the
            // replies: the calls outstanding go past the grant. A server
            // that answers them all, or one that resets the connection
            // when its Receives run out (it posts as many as it grants,
            // and takes no RNR retry), both keep the specs.
            let mut sent = 0;
            let mut reset = None;
            for _ in 0..n {
                let xid = c.next_xid();
                let m = call_with(false, xid, false, v1::ChunkLists::NONE, true)?;
                if let Err(e) = c.conn.send_chain(&m, None, &[], true) {
                    reset = Some(format!("call {} of {n} not sent: {e}", sent + 1));
                    break;
                }
                sent += 1;
            }
            c.log.line(&format!("{sent} NULL calls outstanding against a grant of {granted}"));
            let mut seen = vec![false; sent as usize];
            let mut answered = 0;
            while reset.is_none() && answered < sent {
                let a = match c.answer("an overrunning call's reply") {
                    Ok(a) => a,
                    Err(e) if e.contains("failed with status") => {
                        reset = Some(e);
                        break;
                    }
                    Err(e) => return Err(format!("after {answered} of {sent} answers: {e}")),
                };
                let p = v1::peek(&a.bytes).map_err(|e| format!("a reply with no header: {e:?}"))?;
                match seen.get_mut(p.xid.wrapping_sub(first) as usize) {
                    Some(s) if !*s && p.procedure == v1::RDMA_MSG => *s = true,
                    _ => return Err(format!("an answer for xid {:#x}, procedure {}: not ours, or twice", p.xid, p.procedure)),
                }
                answered += 1;
            }
            match reset {
                Some(why) => c.log.line(&format!("{answered} answered, then the connection was reset ({why})")),
                None => c.log.line(&format!("all {sent} answered")),
            }
            drop(c);
            std::thread::sleep(Duration::from_secs(1));
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-connect-storm" => {
            let mut all = Vec::with_capacity(STORM);
            for _ in 0..STORM {
                all.push(Client::connect(addr, &pd, log)?);
            }
            for c in &mut all {
                c.null(false, v1::ChunkLists::NONE)?;
            }
            for c in &all {
                c.conn.disconnect();
            }
            drop(all);
            let mut log = log;
            log.line(&format!("{STORM} connections made, each carried a call, all dropped"));
            std::thread::sleep(Duration::from_secs(2));
            let mut c = Client::connect(addr, &pd, log)?;
            c.null(false, v1::ChunkLists::NONE).map(|_| ())
        }
        "c-stray-bc-reply" => {
            for v2 in [false, true] {
                let mut c = Client::connect(addr, &pd, log)?;
                c.null(v2, v1::ChunkLists::NONE)?;
                for i in 0..STRAY_BC_REPLIES {
                    let xid = 0x7e00_0000 + i;
                    let mut m = vec![0u8; 1024];
                    let n = if v2 {
                        let ch = v2::Chunks { direction: v2::Direction::Reply, lists: v1::ChunkLists::NONE };
                        v2::Header { xid, credit: 4, body: v2::Body::Msg(ch) }.encode(&mut m).map_err(|e| format!("{e:?}"))?
                    } else {
                        v1::encode_msg(&mut m, xid, 4, &v1::ChunkLists::NONE).map_err(|e| format!("{e:?}"))?
                    };
                    m.truncate(n);
                    // An RPC reply, accepted, successful, AUTH_NONE.
                    m.extend([xid, 1, 0, 0, 0, 0].iter().flat_map(|w| w.to_be_bytes()));
                    c.send("a reply to a backward call never made", &m)?;
                }
                // Its answer is its own reply: the strays got none.
                c.null(v2, v1::ChunkLists::NONE)?;
                c.log.line("the stray replies were dropped and the connection carries calls");
            }
            Ok(())
        }
        other => Err(format!("unknown scenario {other}")),
    }
}
