// SPDX-License-Identifier: GPL-2.0

//! Calls with Read chunks (RFC 8166 section 3.5.3): a call's data items
//! (an NFS WRITE's payload) in Read chunks at their positions, or the
//! whole call in a position-zero Read chunk (a Long Call, RDMA_NOMSG).
//! The chunks are checked and planned from the call's Receive
//! ([`Pull::of`], [`crate::proto::responder::plan_call`]), then pulled by
//! RDMA Read into pages of our own ([`Pull::start`]: the thread posts the
//! Reads and moves on), and once the Reads completed a thread rebuilds
//! the call in its pages, the RPC message read where it came, in the
//! Receive the pull held meanwhile, which is then given back to be
//! posted again ([`InPull::finish`]), as svcrdma keeps a call's Receive context with
//! its Reads.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use super::{
    few::Few,
    recv::{CallChunks, ConnState},
    reply::SEND_WAIT_MS,
    stats::COUNTERS,
    xprt::ServerXprt,
};
use crate::{
    kapi::{
        errno,
        page::{Inbound, OwnedPages},
        ratelimit::RateLimit,
        svc::{CallWriter, RecvRqst},
        PAGE_SIZE,
    },
    proto::{
        responder::{self, CallError, CallPiece, ChunkSpan, OneHandle},
        v1,
    },
    verbs::{Completion, Connection, HeldRecv, RwPosted},
};

/// Most Read chunks of a call this server takes: a Long Call's and a data
/// item's, with room to spare; a call with more gets ERR_CHUNK.
const MAX_READ_CHUNKS: usize = 4;

/// Most segments of all of a call's Read chunks this server takes.
const MAX_READ_SEGMENTS: usize = 64;

/// Most pieces of a call rebuilt from `MAX_READ_CHUNKS` chunks.
const MAX_PIECES: usize = responder::max_pieces(MAX_READ_CHUNKS);

/// Most pieces kept in a [`Pull`] (more take an allocation): a WRITE's
/// data item with the base before it, its roundup and the base's rest.
const FEW_PIECES: usize = responder::max_pieces(1);

/// Most bytes of a call rebuilt from Read chunks: a payload and its
/// header. The thread's pages bound it too ([`RecvRqst::build_call`]).
const MAX_CALL: u32 = super::xprt::MAX_PAYLOAD + 2 * PAGE_SIZE;

/// Most Read segments kept in a [`Pull`] (more take an allocation).
const FEW_READ_SEGMENTS: usize = 4;

/// A call whose Read chunks are still to be pulled: what its header said,
/// and its Receive.
pub(super) struct Pull {
    xid: u32,
    /// The call's Receive, held from [`Pull::start`] until the call is
    /// rebuilt ([`InPull::finish`]): its RPC message is read there, not
    /// copied. The client used a credit for the call and waits for its
    /// reply: the Receive is given back before that goes.
    recv: Option<HeldRecv>,
    /// Bytes of the RPC message sent inline (RDMA_MSG), the last of the
    /// Receive's; none for a Long Call.
    inline_len: usize,
    /// True for a Long Call: the call's base is chunk 0.
    long: bool,
    /// The segments of all the chunks, in the read list's order.
    segs: Few<v1::Segment, FEW_READ_SEGMENTS>,
    /// Each chunk's position, segments in `segs` and length: the first
    /// `nchunks`.
    spans: [ChunkSpan; MAX_READ_CHUNKS],
    nchunks: usize,
    /// How the call is rebuilt: the first `npieces` of these.
    pieces: Few<CallPiece, FEW_PIECES>,
    npieces: usize,
    /// The call's length, rebuilt.
    len: u32,
    /// The Write list and Reply chunk, for the reply.
    kept: Option<KBox<CallChunks>>,
}

/// What became of a pulled call.
pub(super) enum Pulled {
    /// The thread has the call.
    Call,
    /// RDMA_ERROR ERR_CHUNK is owed for the call with this XID: it is
    /// larger than the thread takes.
    ErrChunk(u32),
}

impl Pull {
    /// The call `id` (its XID) whose header has `chunks` with a read list, and
    /// `inline` its RPC message after an RDMA_MSG header, the rest of its
    /// Receive (`None` for RDMA_NOMSG), checked and planned; `None` if the
    /// chunks cannot be carried (ERR_CHUNK is owed) or there is no memory.
    /// Made in a pull and call context `st` kept from earlier calls, if
    /// it has them.
    pub(super) fn of(id: u32, chunks: &v1::Chunks<'_>, inline: Option<&[u8]>, st: &ConnState) -> Option<KBox<Self>> {
        let reads = &chunks.reads;
        if reads.len() > MAX_READ_SEGMENTS {
            return None;
        }
        let inline_len = match inline {
            Some(m) => Some(u32::try_from(m.len()).ok()?),
            None => None,
        };
        let long = inline.is_none();
        let (spare, spare_chunks) = st.spares_for_pull();
        let mut pull = match spare {
            Some(mut p) => {
                // Made as below (every field named here, so that a field
                // added to `Pull` fails to build until it is), its lists
                // resized in place: a list as long as the last call's is
                // not written again.
                let Pull {
                    xid,
                    recv,
                    inline_len,
                    long: is_long,
                    segs,
                    // Written by `walk_reads` below `nchunks`, read
                    // nowhere else.
                    spans: _,
                    nchunks,
                    pieces,
                    npieces,
                    len,
                    kept,
                } = &mut *p;
                *xid = id;
                *recv = None;
                *inline_len = inline.map_or(0, <[u8]>::len);
                *is_long = long;
                segs.resize(reads.len(), v1::Segment::default()).ok()?;
                *nchunks = 0;
                pieces.resize(FEW_PIECES, CallPiece::Pad(0)).ok()?;
                *npieces = 0;
                *len = 0;
                *kept = None;
                COUNTERS.contexts_reused.fetch_add(1, Ordering::Relaxed);
                p
            }
            // Made empty in its box, then filled there: moved in, its
            // lists (most of its size) would be copied.
            None => {
                // Room for every segment: in place for a few.
                let segs = Few::filled(v1::Segment::default(), reads.len()).ok()?;
                // Room for a WRITE's plan, in place: written through
                // `DerefMut`.
                let pieces = Few::filled(CallPiece::Pad(0), FEW_PIECES).ok()?;
                KBox::init(
                    init!(Pull {
                        xid: id,
                        recv: None,
                        inline_len: inline.map_or(0, <[u8]>::len),
                        long,
                        segs,
                        spans: [ChunkSpan::default(); MAX_READ_CHUNKS],
                        nchunks: 0,
                        pieces,
                        npieces: 0,
                        len: 0,
                        kept: None,
                    }),
                    GFP_KERNEL,
                )
                .ok()?
            }
        };
        let p = &mut *pull;
        // The read list walked once: its segments kept, its chunks
        // measured; their handles seen (for the reply's invalidation).
        p.nchunks = responder::walk_reads(reads, &mut p.spans, &mut p.segs)?;
        let mut handles = OneHandle::default();
        for s in p.segs.iter() {
            handles.see(s.handle);
        }
        let spans = p.spans.get(..p.nchunks)?;
        let planned = match responder::plan_call(spans, inline_len, MAX_CALL, &mut p.pieces) {
            // More chunks than a WRITE's one: room for all they may take.
            Err(CallError::NoRoom) => {
                p.pieces.grow_to(MAX_PIECES, CallPiece::Pad(0)).ok()?;
                responder::plan_call(spans, inline_len, MAX_CALL, &mut p.pieces)
            }
            r => r,
        };
        (p.npieces, p.len) = planned.ok()?;
        // Kept for the reply even without a Write list or Reply chunk: its
        // Send may invalidate the Read chunk's handle.
        p.kept = Some(CallChunks::of(chunks, handles, spare_chunks)?);
        Some(pull)
    }

    /// Starts pulling the call's chunks from the client by RDMA Read, all
    /// in one operation, into pages the operation allocates (one run per
    /// chunk): posts the Reads and returns, keeping the call's Receive
    /// `recv` (whose bytes [`Pull::of`] read) until the call is rebuilt.
    /// Their completion ([`ServerXprt::rw_done`]) has a thread take the
    /// call up again ([`InPull::finish`]). An error: the call is lost,
    /// and the caller closes the connection (the client sends it again on
    /// its next; the Receive stays out of use until the connection's
    /// teardown).
    ///
    /// [`ServerXprt::rw_done`]: crate::verbs::ConnHandler::rw_done
    pub(super) fn start(
        mut self: KBox<Self>,
        recv: HeldRecv,
        st: &ConnState,
        conn: &Connection<ServerXprt>,
    ) -> Result<InPull> {
        self.recv = Some(recv);
        let mut total = 0u64;
        // Each chunk's segments and length (`of` kept at most
        // `MAX_READ_CHUNKS`; the plan checked each length, below
        // `MAX_CALL`).
        let mut chunks = [(0usize, 0u32); MAX_READ_CHUNKS];
        let spans = self.spans.get(..self.nchunks).ok_or(EINVAL)?;
        for (c, span) in chunks.iter_mut().zip(spans) {
            *c = (span.segments, u32::try_from(span.len).map_err(|_| EINVAL)?);
            total += span.len;
        }
        let chunks = chunks.get(..spans.len()).ok_or(EINVAL)?;
        let segs = self.segs.iter().map(|s| (s.handle, s.offset, s.length));
        let posted = st.post_read(conn, segs, chunks)?;
        COUNTERS.read_bytes.fetch_add(total, Ordering::Relaxed);
        Ok(InPull { pull: self, posted })
    }

    /// Gives `rq` the call that `pages`, pulled as `how` says, and the RPC
    /// message in its Receive rebuild, with the chunks kept for its reply.
    /// An error: the call is lost.
    fn finish(
        &mut self,
        how: Completion,
        pages: &mut ChunkPages,
        conn: &Connection<ServerXprt>,
        rq: &mut RecvRqst<'_, CallChunks>,
    ) -> Result<Pulled> {
        match how {
            Completion::Ok => {}
            // The connection went: the call is lost with it.
            Completion::Flushed => return Err(errno::ECONNRESET()),
            // The client's memory could not be read (a region it let go
            // of, or never had): the call is lost, and the connection.
            Completion::Failed(status) => {
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_info!(
                        "rdma server: a call's Read chunks could not be read from the client (completion status {}): closing the connection\n",
                        status
                    );
                }
                return Err(errno::ECONNRESET());
            }
        }
        if pages.filled() < self.nchunks {
            // Never: a Read that completed filled every sink it was made
            // over.
            return Err(EIO);
        }
        let recv = self.recv.as_ref().ok_or(EINVAL)?;
        let built = conn
            .with_held(recv, |msg| {
                // The RPC message: the Receive's last bytes.
                let inline = msg.len().checked_sub(self.inline_len).and_then(|at| msg.get(at..)).ok_or(EINVAL)?;
                self.build(inline, pages, rq)
            })
            // Never: the Receive is this connection's.
            .ok_or(EINVAL)?;
        match built {
            Ok(()) => {}
            Err(e) if e == errno::EMSGSIZE() => return Ok(Pulled::ErrChunk(self.xid)),
            Err(e) => return Err(e),
        }
        if let Some(k) = self.kept.take() {
            rq.set_ctxt(k);
        }
        Ok(Pulled::Call)
    }

    /// Gives `rq` the call that `pages` and `inline`, its RPC message sent
    /// inline (empty for a Long Call), rebuild.
    fn build(&self, inline: &[u8], pages: &mut ChunkPages, rq: &mut RecvRqst<'_, CallChunks>) -> Result {
        let pieces = self.pieces.get(..self.npieces).ok_or(EINVAL)?;
        match responder::one_item(pieces) {
            // One data item (an NFS WRITE's payload) in a call whose rest
            // came inline and fits the head page: its pages become the
            // thread's, as svcrdma gives its Read sinks, not copied.
            Some(item) if !self.long && pages.filled() == 1 && inline.len() <= PAGE_SIZE as usize => {
                let data = pages.take_first().ok_or(EINVAL)?;
                // The roundup after the data in its last page (a page
                // holds a multiple of four bytes) is zero: a sink's bytes
                // past its chunk's are.
                let page_len = item.len.checked_add(item.pad).ok_or(EINVAL)?;
                let n = data.len() as u64;
                let r = rq.set_call_item(inline, item.position, data, page_len);
                if r.is_ok() {
                    COUNTERS.read_pages_given.fetch_add(n, Ordering::Relaxed);
                }
                r
            }
            _ => self.build_flat(inline, pages, rq),
        }
    }

    /// Gives `rq` the call copied into its pages, piece by piece.
    fn build_flat(&self, inline: &[u8], pages: &ChunkPages, rq: &mut RecvRqst<'_, CallChunks>) -> Result {
        rq.build_call(self.len, |w| {
            for p in self.pieces.iter().take(self.npieces) {
                match *p {
                    CallPiece::Base { from, to } if self.long => put_pages(w, pages.get(0).ok_or(EINVAL)?, from, to)?,
                    CallPiece::Base { from, to } => {
                        w.bytes(inline.get(from as usize..to as usize).ok_or(EINVAL)?)?
                    }
                    CallPiece::Chunk { chunk, len } => put_pages(w, pages.get(chunk).ok_or(EINVAL)?, 0, len)?,
                    CallPiece::Pad(n) => w.zeros(n)?,
                }
            }
            Ok(())
        })
    }
}

/// A call whose Read chunks are being pulled: the call (with the pages the
/// Reads fill) and the posted Reads. Kept by its connection, in the order
/// posted, until a thread finishes it.
pub(super) struct InPull {
    pull: KBox<Pull>,
    posted: RwPosted<Inbound>,
}

impl InPull {
    /// True once the Reads completed (or were flushed).
    pub(super) fn ready(&self, conn: &Connection<ServerXprt>) -> bool {
        conn.rw_completed(&self.posted)
    }

    /// Ends the Reads (done: no wait) and gives `rq` the call (see
    /// [`Pull::finish`]), then gives the call's Receive back
    /// ([`ConnState::repost`]): the credit comes back before the reply, or
    /// any RDMA_ERROR, goes. An error:
    /// the call is lost. The pull is kept by `st` for a later call.
    pub(super) fn finish(
        self,
        st: &ConnState,
        conn: &Connection<ServerXprt>,
        rq: &mut RecvRqst<'_, CallChunks>,
    ) -> Result<Pulled> {
        let InPull { mut pull, posted } = self;
        let mut pages = ChunkPages { pages: Default::default() };
        // A token the connection does not take any more: its teardown
        // destroyed the operation, after the queue pair was drained.
        let how = conn.rw_wait_filled(posted, &mut pages.pages).map_err(|_| errno::ENOTCONN())?;
        let finished = pull.finish(how, &mut pages, conn, rq);
        if let Some(h) = pull.recv.take() {
            st.repost(conn, h)?;
        }
        // The chunks kept for the reply (still here if the call was lost)
        // go now.
        pull.kept = None;
        st.keep_pull(pull);
        finished
    }
}

/// The pages each Read chunk of a call was pulled into, in the read
/// list's order, filled. Kept in place, filled and read through `&mut`
/// (moved by value, a few hundred bytes cost a copy at each move).
struct ChunkPages {
    pages: [Option<OwnedPages>; MAX_READ_CHUNKS],
}

impl ChunkPages {
    /// How many chunks were filled before the first that was not.
    fn filled(&self) -> usize {
        self.pages.iter().take_while(|p| p.is_some()).count()
    }

    /// The pages of chunk `i`.
    fn get(&self, i: usize) -> Option<&OwnedPages> {
        self.pages.get(i)?.as_ref()
    }

    /// The pages of the first chunk, taken out.
    fn take_first(&mut self) -> Option<OwnedPages> {
        self.pages.first_mut()?.take()
    }
}

/// Appends bytes `from..to` of `pages` (their bytes in order) to the call.
fn put_pages(w: &mut CallWriter<'_>, pages: &OwnedPages, from: u32, to: u32) -> Result {
    let mut at = from;
    while at < to {
        let (i, off) = ((at / PAGE_SIZE) as usize, at % PAGE_SIZE);
        let n = (to - at).min(PAGE_SIZE - off);
        w.page(pages.page(i).ok_or(EINVAL)?, off, n)?;
        at += n;
    }
    Ok(())
}

impl ConnState {
    /// Posts the RDMA Reads of the client's segments `segs` (rkey,
    /// address, length) into pages of their own, one run per chunk of
    /// `chunks` (its segments, its length), as one operation. Waits for
    /// room while the connection's R/W operations or its Send Queue are
    /// all in use.
    fn post_read<S>(&self, conn: &Connection<ServerXprt>, segs: S, chunks: &[(usize, u32)]) -> Result<RwPosted<Inbound>>
    where
        S: Iterator<Item = (u32, u64, u32)> + Clone,
    {
        let mut op = self.rw_prepare_waiting(|| conn.rw_prepare_read(segs.clone(), chunks, 0))?;
        loop {
            let seen = self.sends_seen();
            match conn.rw_post(op) {
                Ok(p) => return Ok(p),
                Err((e, back)) if e == errno::ENOBUFS() => {
                    op = back;
                    if let Err(e) = self.wait_sends(seen, SEND_WAIT_MS) {
                        let _ = conn.rw_discard(op);
                        return Err(e);
                    }
                }
                Err((e, back)) => {
                    let _ = conn.rw_discard(back);
                    return Err(e);
                }
            }
        }
    }
}
