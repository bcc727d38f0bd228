// SPDX-License-Identifier: GPL-2.0

//! A connection's calls (RFC 8166 section 4): each Receive is held until a
//! server thread takes its call ([`ConnState::recvfrom`]), or, for a call
//! with Read chunks, until its Reads are done and a thread takes it up,
//! then given back to be reposted with a batch of others
//! ([`ConnState::repost`]), which is the credit coming back. Calls are
//! taken in the order they came.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::{
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use super::{
    backchannel::{BcXprt, BC_REQUESTS},
    few::Few,
    read_chunk::{InPull, Pull, Pulled},
    ring::Ring,
    stats::COUNTERS,
    version::ConnVersion,
    xprt::ServerXprt,
};
use crate::{
    kapi::{
        ratelimit::RateLimit,
        svc::{RecvRqst, XptFlag},
        trace::{self, ChunkType},
    },
    proto::{
        credits::recv_batch,
        responder::{self, OneHandle},
        v1,
        v2::{self, Version},
        xchar::Characteristics,
    },
    verbs::{Completion, Connection, HeldRecv, Live, Received},
};

/// A connection's state.
#[pin_data]
pub(crate) struct ConnState {
    /// The connection, until the transport is freed, for those outside
    /// the core's calls (the backchannel); those get the one attached to
    /// the transport, without a lock. Its handler is the transport, which
    /// holds it here and there: taking both out breaks that cycle.
    #[pin]
    conn: SpinLock<Option<Arc<Connection<ServerXprt>>>>,
    /// Receives whose call no thread has taken yet, and calls whose Read
    /// chunks are being pulled, oldest first.
    #[pin]
    calls: SpinLock<Calls>,
    /// Call contexts and pulls the connection's calls are done with, kept
    /// for its next calls.
    #[pin]
    spares: SpinLock<Spares>,
    /// Receives threads gave back, reposted together (one chained post)
    /// once `repost_batch` gathered: svcrdma posts its Receives in
    /// batches too. A leaf lock but for the post itself.
    #[pin]
    reposts: SpinLock<Reposts>,
    repost_batch: usize,
    /// Bumped when a Send buffer may have come back; replies waiting for
    /// one wait on `send_wait`, with `send_lock` held while they check,
    /// counted in `send_waiters`: with none, a buffer back takes no lock
    /// and wakes no one (most of the time, on every Send and pull).
    sends_back: AtomicU64,
    send_waiters: AtomicU32,
    #[pin]
    send_lock: SpinLock<()>,
    #[pin]
    send_wait: CondVar,
    /// The core took the transport down: Receives are no longer held.
    detached: AtomicBool,
    /// The backchannel transport nfsd's callbacks go out on, once made,
    /// until the core takes the connection down. Replies to its calls are
    /// completed under the lock.
    #[pin]
    bc: SpinLock<Option<Arc<BcXprt>>>,
    /// Credits granted: the Receives the connection has.
    pub(super) credits: u32,
    /// Bytes of our Send and Receive buffers.
    pub(super) send_buf: u32,
    pub(super) recv_buf: u32,
    /// On Version One, most bytes a reply may take in one Send: the
    /// smaller of our Send buffers and the client's Receives (RFC 8797);
    /// see [`ConnState::send_max`].
    pub(super) send_max: u32,
    /// On Version One, the client takes Send With Invalidate (RFC 8797
    /// section 4.1); see [`ConnState::takes_remote_invalidate`].
    pub(super) remote_invalidate: bool,
    /// The protocol version, set by the first message.
    pub(super) version: ConnVersion,
    /// On Version Two, the client's transport characteristics as its
    /// messages said (xcharext), and the two replies need, read without
    /// the lock.
    #[pin]
    pub(super) peer: SpinLock<Characteristics>,
    pub(super) peer_rbsiz: AtomicU32,
    pub(super) peer_rem_inv: AtomicBool,
    /// Our ROPT_INITXCH went (or is going) out.
    pub(super) initxch_sent: AtomicBool,
}

/// What waits for a connection's threads.
struct Calls {
    /// Receives whose call no thread has taken yet.
    held: Ring<HeldRecv>,
    /// Calls whose Read chunks are being pulled, in the order the Reads
    /// were posted (the order they complete in).
    pulls: Ring<InPull>,
}

/// What a connection's calls are done with, kept for its next ones
/// (svcrdma recycles its call contexts the same way): a 4 KiB READ or
/// WRITE then allocates none of its own. Each kind keeps as many as the
/// connection has credits, the most its calls can hold at once (a
/// client at full depth has a pull or a context out for every credit:
/// with fewer kept, some of its calls would free one and the next ones
/// allocate it again); they are made only as the load needs them. A
/// leaf lock: nothing else is taken, nor anything freed, with it held.
struct Spares {
    chunks: Ring<KBox<CallChunks>>,
    pulls: Ring<KBox<Pull>>,
}

/// Receives given back, waiting for their batch to be reposted: the
/// first `n` of `held`.
struct Reposts {
    held: [Option<HeldRecv>; MAX_REPOST_BATCH],
    n: usize,
}

/// Most Receives reposted together.
const MAX_REPOST_BATCH: usize = crate::proto::credits::MAX_RECV_BATCH as usize;

impl Reposts {
    /// Adds `h`; gives it back if there is no room.
    fn push(&mut self, h: HeldRecv) -> core::result::Result<(), HeldRecv> {
        match self.held.get_mut(self.n) {
            Some(slot) => {
                *slot = Some(h);
                self.n += 1;
                Ok(())
            }
            None => Err(h),
        }
    }

    /// Takes the last added.
    fn pop(&mut self) -> Option<HeldRecv> {
        self.n = self.n.checked_sub(1)?;
        self.held.get_mut(self.n)?.take()
    }
}

/// What [`ConnState::new`] makes a connection with.
pub(super) struct ConnParams {
    /// Credits granted: [`ConnParams::recvs`] and
    /// [`ConnParams::repost_batch`] follow from them.
    pub(super) credits: u32,
    /// Bytes of our Send and Receive buffers.
    pub(super) send_buf: u32,
    pub(super) recv_buf: u32,
    /// What RFC 8797 settled: most bytes of a reply sent inline, and that
    /// the client takes Send With Invalidate (used on Version One).
    pub(super) send_max: u32,
    pub(super) remote_invalidate: bool,
    /// The versions served (bit n: version n).
    pub(super) versions: u32,
}

impl ConnParams {
    /// How many Receives threads give back are reposted together.
    pub(super) fn repost_batch(&self) -> u32 {
        recv_batch(self.credits).min(MAX_REPOST_BATCH as u32)
    }

    /// The Receives the connection has: one per credit, one per backward
    /// call in flight (for its reply), and `repost_batch - 1` for those
    /// waiting to be reposted with their batch: however many wait, every
    /// credit and backward call has a Receive posted.
    pub(super) fn recvs(&self) -> u32 {
        self.credits + BC_REQUESTS + self.repost_batch() - 1
    }
}

/// Most segments of a Reply chunk or of one Write chunk this server takes;
/// a call that offers more is answered with ERR_CHUNK.
pub(super) const MAX_CHUNK_SEGMENTS: usize = 16;

/// Most Write chunks of a call this server takes (one per READ of a
/// compound); a call that offers more is answered with ERR_CHUNK.
pub(super) const MAX_WRITE_CHUNKS: usize = 4;

/// Segments kept for a call: in place when few (a READ's one Write chunk
/// of one or two segments), else in an allocation of their own.
type Segs = Few<v1::Segment, FEW_SEGMENTS>;

/// Most segments [`Segs`] keeps in place.
const FEW_SEGMENTS: usize = 4;

/// Part `i` of segments kept as one run `all` cut into parts, the first
/// starting at `first`, each ending where `ends` says; `None` past the
/// last part or outside `all`.
fn part<'a>(all: &'a [v1::Segment], first: usize, ends: &[usize], i: usize) -> Option<&'a [v1::Segment]> {
    let start = match i.checked_sub(1) {
        None => first,
        Some(before) => *ends.get(before)?,
    };
    all.get(start..*ends.get(i)?)
}

/// What a call's `sendto` needs of its transport header: the chunks it
/// offered, in order, and where the reply's payloads lie. One allocation
/// per call when it offered few segments (a READ's Write chunk), two
/// otherwise.
///
/// # Invariants
///
/// `reply_end <= write_ends[0] <= ... <= write_ends[nwrites - 1] ==
/// segs.len()` (`nwrites <= MAX_WRITE_CHUNKS`): the Reply chunk's
/// segments, then each Write chunk's.
pub(crate) struct CallChunks {
    /// The Reply chunk's segments (none if it offered none: a reply too
    /// long to send inline is written there), then each Write chunk's.
    segs: Segs,
    /// Where the Reply chunk's segments end in `segs`.
    reply_end: usize,
    /// Where each Write chunk's segments end in `segs`, the first
    /// `nwrites`: each takes one result payload (`xpo_result_payload`),
    /// in order.
    write_ends: [usize; MAX_WRITE_CHUNKS],
    nwrites: usize,
    /// For each Write chunk, the payload it takes: its offset and length
    /// in the reply, once the upper layer said so. Set only below
    /// `nwrites`: none past it.
    payloads: [Option<(u32, u32)>; MAX_WRITE_CHUNKS],
    /// The Write chunk the next payload goes to.
    next: usize,
    /// The one handle the call's chunks name, if one: the reply's Send
    /// may invalidate it ([`responder::single_handle`], found as
    /// [`OneHandle`] saw the segments).
    pub(super) invalidate: Option<u32>,
}

impl CallChunks {
    /// The chunks of a call's header, kept; `None` if there are more
    /// chunks or segments than this server takes, or no memory. `handles`
    /// saw the read list's segments, if it has any.
    ///
    /// Kept in `spare` if there is one (an earlier call's, emptied here).
    pub(super) fn of(chunks: &v1::Chunks<'_>, mut handles: OneHandle, spare: Option<KBox<Self>>) -> Option<KBox<Self>> {
        let nreply = chunks.reply.as_ref().map_or(0, |r| r.len());
        // (A Write chunk's segments are counted as it is kept.)
        if nreply > MAX_CHUNK_SEGMENTS || chunks.writes.len() > MAX_WRITE_CHUNKS {
            return None;
        }
        let mut kept = match spare {
            Some(mut k) => {
                k.empty();
                COUNTERS.contexts_reused.fetch_add(1, Ordering::Relaxed);
                k
            }
            // Made empty in its box, then filled there (moved in, it
            // would be copied).
            None => KBox::init(
                init!(CallChunks {
                    segs: Segs::new(v1::Segment::default()),
                    reply_end: 0,
                    write_ends: [0; MAX_WRITE_CHUNKS],
                    nwrites: 0,
                    payloads: [None; MAX_WRITE_CHUNKS],
                    next: 0,
                    invalidate: None,
                }),
                GFP_KERNEL,
            )
            .ok()?,
        };
        let c = &mut *kept;
        if let Some(r) = &chunks.reply {
            for seg in r.iter() {
                handles.see(seg.handle);
                c.segs.push(seg).ok()?;
            }
        }
        c.reply_end = c.segs.len();
        for (end, w) in c.write_ends.iter_mut().zip(chunks.writes.iter()) {
            if w.len() > MAX_CHUNK_SEGMENTS {
                return None;
            }
            for seg in w.iter() {
                handles.see(seg.handle);
                c.segs.push(seg).ok()?;
            }
            *end = c.segs.len();
        }
        // INVARIANT: the Reply chunk's segments, then each Write chunk's,
        // each end recorded after its segments (at most
        // `MAX_WRITE_CHUNKS`, checked above).
        c.nwrites = chunks.writes.len();
        c.invalidate = handles.single();
        Some(kept)
    }

    /// Made as [`CallChunks::of`] makes it before it keeps a chunk.
    fn empty(&mut self) {
        // Every field (named here so that a field added to `CallChunks`
        // fails to build until it is set below).
        let CallChunks { segs: _, reply_end: _, write_ends: _, nwrites: _, payloads: _, next: _, invalidate: _ } = self;
        // INVARIANT: no segment, no chunk.
        self.segs.clear(v1::Segment::default());
        self.reply_end = 0;
        // (`write_ends` is read below `nwrites` only, each written as its
        // chunk is kept. A payload is set below `nwrites` only, so those
        // past it are none already.)
        let n = core::mem::replace(&mut self.nwrites, 0);
        for p in self.payloads.iter_mut().take(n) {
            *p = None;
        }
        self.next = 0;
        self.invalidate = None;
    }

    /// The Reply chunk's segments (empty if the call offered none).
    pub(super) fn reply(&self) -> &[v1::Segment] {
        self.segs.get(..self.reply_end).unwrap_or_default()
    }

    /// The segments of Write chunk `i`.
    fn write(&self, i: usize) -> Option<&[v1::Segment]> {
        part(&self.segs, self.reply_end, self.write_ends.get(..self.nwrites)?, i)
    }

    /// The Write chunks' segments, in order.
    pub(super) fn writes(&self) -> impl Iterator<Item = &[v1::Segment]> {
        (0..self.nwrites).map(|i| self.write(i).unwrap_or_default())
    }

    /// For each Write chunk, in order, the payload it takes (offset and
    /// length in the reply), if one.
    pub(super) fn payloads(&self) -> &[Option<(u32, u32)>] {
        self.payloads.get(..self.nwrites).unwrap_or_default()
    }

    /// The upper layer placed a result payload of `length` bytes at
    /// `offset` in the reply (`xpo_result_payload`): it goes to the next
    /// Write chunk, if one is left (else it stays inline). Fails with
    /// `E2BIG` if it is larger than that chunk.
    pub(super) fn note_payload(&mut self, offset: u32, length: u32) -> Result {
        if length == 0 {
            return Ok(());
        }
        let i = self.next;
        if i >= self.nwrites {
            return Ok(());
        }
        let Some(room) = self.write(i).map(|c| c.iter().map(|s| u64::from(s.length)).sum::<u64>()) else {
            return Ok(());
        };
        self.next += 1;
        if u64::from(length) > room {
            return Err(E2BIG);
        }
        if let Some(p) = self.payloads.get_mut(i) {
            *p = Some((offset, length));
        }
        Ok(())
    }

    /// True if a payload goes to a Write chunk.
    pub(super) fn has_payload(&self) -> bool {
        self.payloads().iter().any(Option::is_some)
    }
}

/// What became of a Receive's message.
enum Taken {
    /// The thread has the call.
    Call,
    /// The call's Read chunks are to be pulled, then a thread has it.
    Pull(KBox<Pull>),
    /// Nothing to do (not a call).
    Nothing,
    /// RDMA_ERROR ERR_CHUNK is owed for the call with this XID (its
    /// chunks, or its size, cannot be carried yet).
    ErrChunk(u32),
    /// RDMA_ERROR ERR_VERS (versions low to high) is owed for the message
    /// with this XID.
    ErrVers(u32, u32, u32),
}

impl ConnState {
    /// The state of a connection made with `p`.
    pub(super) fn new(p: &ConnParams) -> Result<Pin<KBox<Self>>> {
        // Room for a call in every Receive (a client that sends more calls
        // than it has credits may fill them all); a pull is a call that
        // holds its Receive: no more of them either.
        let recvs = p.recvs() as usize;
        let calls = Calls { held: Ring::new(recvs)?, pulls: Ring::new(recvs)? };
        let spares = Spares { chunks: Ring::new(p.credits as usize)?, pulls: Ring::new(p.credits as usize)? };
        let repost_batch = p.repost_batch() as usize;
        let reposts = Reposts { held: Default::default(), n: 0 };
        let xch = Characteristics::DEFAULT;
        KBox::pin_init(
            pin_init!(ConnState {
                conn <- new_spinlock!(None, "rpcrdma_rs:svc_conn"),
                calls <- new_spinlock!(calls, "rpcrdma_rs:svc_calls"),
                spares <- new_spinlock!(spares, "rpcrdma_rs:svc_spares"),
                reposts <- new_spinlock!(reposts, "rpcrdma_rs:svc_reposts"),
                repost_batch,
                sends_back: AtomicU64::new(0),
                send_waiters: AtomicU32::new(0),
                send_lock <- new_spinlock!((), "rpcrdma_rs:svc_send_lock"),
                send_wait <- new_condvar!("rpcrdma_rs:svc_send_wait"),
                detached: AtomicBool::new(false),
                bc <- new_spinlock!(None, "rpcrdma_rs:svc_bc"),
                credits: p.credits,
                send_buf: p.send_buf,
                recv_buf: p.recv_buf,
                send_max: p.send_max,
                remote_invalidate: p.remote_invalidate,
                version: ConnVersion::new(p.versions),
                peer <- new_spinlock!(xch, "rpcrdma_rs:svc_peer_xch"),
                peer_rbsiz: AtomicU32::new(xch.rbsiz),
                peer_rem_inv: AtomicBool::new(xch.req_rem_inv),
                initxch_sent: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )
    }

    /// Keeps `c`, the accepted connection.
    pub(super) fn set_connection(&self, c: Arc<Connection<ServerXprt>>) {
        let old = self.conn.lock().replace(c);
        // Never: accepted once.
        drop(old);
    }

    /// A call context an earlier call was done with, if one is kept.
    fn spare_chunks(&self) -> Option<KBox<CallChunks>> {
        self.spares.lock().chunks.pop()
    }

    /// A pull and a call context earlier calls were done with, those kept.
    pub(super) fn spares_for_pull(&self) -> (Option<KBox<Pull>>, Option<KBox<CallChunks>>) {
        let mut s = self.spares.lock();
        (s.pulls.pop(), s.chunks.pop())
    }

    /// Keeps `c`, a call context the core is done with, for a later call
    /// (freed if enough are kept).
    pub(super) fn keep_chunks(&self, c: KBox<CallChunks>) {
        let over = self.spares.lock().chunks.push(c).err();
        // Freed without the lock.
        drop(over);
    }

    /// Keeps `p`, a pull whose call was rebuilt (its Receive, sinks and
    /// chunks gone), for a later call (freed if enough are kept).
    pub(super) fn keep_pull(&self, p: KBox<Pull>) {
        let over = self.spares.lock().pulls.push(p).err();
        drop(over);
    }

    /// The connection, while the transport has one.
    pub(super) fn connection(&self) -> Option<Arc<Connection<ServerXprt>>> {
        self.conn.lock().clone()
    }

    /// True once the core took the transport down.
    pub(super) fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    /// Keeps `bc`, the backchannel made for the connection, until the
    /// core takes the connection down: `ENOTCONN` if it did already,
    /// `EEXIST` if the connection has one.
    pub(super) fn attach_backchannel(&self, bc: Arc<BcXprt>) -> Result {
        let mut g = self.bc.lock();
        // Checked under the lock `detach` takes after setting the flag.
        let refused = if self.is_detached() {
            crate::kapi::errno::ENOTCONN()
        } else if g.is_some() {
            EEXIST
        } else {
            *g = Some(bc);
            return Ok(());
        };
        drop(g);
        Err(refused)
    }

    /// A Receive completed: its call is held for a thread, and the
    /// transport signalled. (The queue has room for every Receive: a
    /// client that sends more calls than it has credits finds no Receive
    /// posted, and its connection fails.) The first message in a version
    /// served settles the connection's; a Version Two OPTIONAL message is
    /// taken here, in order with the calls.
    pub(super) fn received(&self, x: &ServerXprt, conn: Live<'_, ServerXprt>, msg: Received<'_>) {
        if self.detached.load(Ordering::Acquire) {
            // Reposted: nobody takes calls any more.
            return;
        }
        if let Ok(p) = v1::peek(msg.data) {
            let v = self.version.check(p.vers);
            // The reply to a backward call: completed now, the Receive
            // reposted when `msg` goes.
            if let Some(r) = v.ok().and_then(|_| responder::backward_reply(msg.data, p.vers)) {
                match self.bc.lock().as_ref() {
                    Some(bc) => bc.complete(&r),
                    None => {
                        COUNTERS.bc_replies_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                return;
            }
            if v == Ok(Version::V2) && p.procedure == v2::RDMA2_OPTIONAL {
                if let Ok((h, _)) = v2::Header::decode(msg.data) {
                    if let v2::Body::Optional(o) = h.body {
                        self.optional(x, &conn, h.xid, &o);
                    }
                    // Reposted when `msg` goes.
                    return;
                }
            }
        }
        if let Err(h) = self.calls.lock().held.push(msg.hold()) {
            // Never: one slot per Receive. The Receive stays out of use,
            // and the connection goes.
            drop(h);
            x.svc().close_later();
            return;
        }
        x.svc().signal(XptFlag::Data);
    }

    /// One call for the thread `rq`, if one waits and is a call this
    /// server takes: the oldest call whose Read chunks were pulled, else
    /// the next Receive's; what it cannot carry is answered with
    /// RDMA_ERROR, once its Receive is posted again. A call with Read
    /// chunks is not the thread's yet: it posts the Reads and moves on.
    pub(super) fn recvfrom(&self, x: &ServerXprt, conn: &Connection<ServerXprt>, rq: &mut RecvRqst<'_, CallChunks>) {
        let (h, pulled) = {
            let mut q = self.calls.lock();
            let pulled = if q.pulls.front().is_some_and(|p| p.ready(conn)) { q.pulls.pop() } else { None };
            let h = if pulled.is_none() { q.held.pop() } else { None };
            // Cleared under the lock: a Receive that completes after sets
            // it again once it is queued, Reads that complete after once
            // they took the lock (`pull_done`). So the oldest pull, found
            // not done above, is not asked again (each asking takes the
            // R/W table's lock); the next one is, when one was taken.
            let pull_ready = pulled.is_some() && q.pulls.front().is_some_and(|p| p.ready(conn));
            if q.held.is_empty() && !pull_ready {
                x.svc().clear_flag(XptFlag::Data);
            }
            (h, pulled)
        };
        // Other threads may take the next call meanwhile.
        rq.release_xprt();
        if let Some(p) = pulled {
            let finished = p.finish(self, conn, rq);
            // The Reads' Send Queue slots are free again.
            self.sends_freed();
            let taken = match finished {
                Ok(Pulled::Call) => Taken::Call,
                Ok(Pulled::ErrChunk(xid)) => Taken::ErrChunk(xid),
                Err(e) => return self.pull_failed(x, e),
            };
            return self.answer(x, conn, taken);
        }
        let Some(h) = h else { return };
        let taken = conn.with_held(&h, |msg| self.take_call(rq, msg)).unwrap_or(Taken::Nothing);
        if let Taken::Pull(p) = taken {
            // The pull holds the Receive: the call's RPC message is read
            // there once the Reads are done, and the Receive reposted
            // then, before the reply.
            match p.start(h, self, conn) {
                Ok(p) => self.pulling(x, conn, p),
                Err(e) => self.pull_failed(x, e),
            }
            return;
        }
        // Given back: the credit comes back, before any RDMA_ERROR the
        // client may answer with its next call.
        if self.repost(conn, h).is_err() {
            x.svc().close_later();
        }
        self.answer(x, conn, taken);
    }

    /// Gives `h`, a Receive whose call a thread took, back to be posted
    /// again, with the next ones once `repost_batch` gathered. Until
    /// then the Receives posted beyond the credits and backward calls
    /// stand in for it ([`ConnParams::recvs`]): the credit is back.
    pub(super) fn repost(&self, conn: &Connection<ServerXprt>, h: HeldRecv) -> Result {
        let mut q = self.reposts.lock();
        if let Err(h) = q.push(h) {
            // Never: the batch is posted once it has `repost_batch`.
            drop(q);
            return conn.release_held(h);
        }
        if q.n < self.repost_batch {
            return Ok(());
        }
        conn.release_held_many(|| q.pop())
    }

    /// Sends the RDMA_ERROR `taken` owes, if one.
    fn answer(&self, x: &ServerXprt, conn: &Connection<ServerXprt>, taken: Taken) {
        let sent = match taken {
            Taken::Call | Taken::Nothing | Taken::Pull(_) => Ok(()),
            Taken::ErrChunk(xid) => self.send_error_chunk(conn, xid),
            Taken::ErrVers(xid, low, high) => self.send_error_vers(conn, xid, low, high),
        };
        if sent.is_err() {
            x.svc().close_later();
        }
    }

    /// Keeps `p`, whose Reads are posted, for the thread that finds them
    /// done; one is woken now if they already are (their completion may
    /// have found the queue without them).
    fn pulling(&self, x: &ServerXprt, conn: &Connection<ServerXprt>, p: InPull) {
        let mut q = self.calls.lock();
        if let Err(p) = q.pulls.push(p) {
            // Never: no more pulls than credits. The Reads' token is lost
            // (the connection's teardown ends them), and the connection
            // goes.
            drop(q);
            drop(p);
            x.svc().close_later();
            return;
        }
        let ready = q.pulls.front().is_some_and(|p| p.ready(conn));
        drop(q);
        if ready {
            x.svc().signal(XptFlag::Data);
        }
    }

    /// Reads of a pull completed (or were flushed): a thread finishes the
    /// call. The lock is taken first, so that a thread deciding there is
    /// nothing to do has decided before this.
    pub(super) fn pull_done(&self, x: &ServerXprt) {
        drop(self.calls.lock());
        x.svc().signal(XptFlag::Data);
    }

    /// A call whose Read chunks could not be pulled is lost (the client
    /// sends it again once reconnected), and the connection goes: it went
    /// already, or the client's memory could not be read (said once
    /// already), or `e` is logged.
    fn pull_failed(&self, x: &ServerXprt, e: Error) {
        if e != crate::kapi::errno::ECONNRESET() {
            static MSG: RateLimit = RateLimit::new();
            if MSG.allow() {
                pr_warn!(
                    "rdma server: cannot pull a call's Read chunks (error {}): closing the connection\n",
                    e.to_errno()
                );
            }
        }
        x.svc().close_later();
    }

    /// The call in `msg` (a transport header, then the RPC message) for
    /// `rq`, in the connection's version; see [`ConnState::recvfrom`].
    fn take_call(&self, rq: &mut RecvRqst<'_, CallChunks>, msg: &[u8]) -> Taken {
        // A header whose prefix does not decode: dropped, no XID to
        // answer.
        let Ok(p) = v1::peek(msg) else { return Taken::Nothing };
        match self.version.check(p.vers) {
            Err((low, high)) => Taken::ErrVers(p.xid, low, high),
            Ok(Version::V1) => match v1::Header::decode_split(msg, &v1::Limits::DEFAULT) {
                Ok((h, call)) => match h.body {
                    v1::Body::Msg(chunks) => self.take_chunks(rq, p.vers, h.xid, &chunks, Some(call)),
                    v1::Body::NoMsg(chunks) => self.take_chunks(rq, p.vers, h.xid, &chunks, None),
                    // RFC 5666's RDMA_MSGP.
                    v1::Body::Msgp { .. } => Taken::ErrChunk(h.xid),
                    // Not calls.
                    v1::Body::Done | v1::Body::Error(_) => Taken::Nothing,
                },
                // A header that does not decode, whose XID can be read:
                // ERR_CHUNK, as svcrdma answers.
                Err(_) => Taken::ErrChunk(p.xid),
            },
            Ok(Version::V2) => match v2::Header::decode_with(msg, &v2::Limits::DEFAULT) {
                Ok((h, call)) => match h.body {
                    v2::Body::Msg(c) if c.direction == v2::Direction::Call => self.take_chunks(rq, p.vers, h.xid, &c.lists, Some(call)),
                    v2::Body::NoMsg(c) if c.direction == v2::Direction::Call => self.take_chunks(rq, p.vers, h.xid, &c.lists, None),
                    // Replies to backward calls (taken as they came),
                    // RDMA2_ERROR, and OPTIONAL (taken as it came).
                    _ => Taken::Nothing,
                },
                // ERR_BAD_HEADER.
                Err(_) => Taken::ErrChunk(p.xid),
            },
        }
    }

    /// A call `xid` (in version `vers`) whose header offered `chunks`, its RPC message
    /// `inline` after the header (RDMA_MSG) or none (RDMA_NOMSG): the
    /// thread takes it now, or once its Read chunks are pulled; what
    /// cannot be carried gets ERR_CHUNK.
    fn take_chunks(&self, rq: &mut RecvRqst<'_, CallChunks>, vers: u32, xid: u32, chunks: &v1::Chunks<'_>, inline: Option<&[u8]>) -> Taken {
        let rtype = match (chunks.reads.is_empty(), inline) {
            (true, _) => ChunkType::Inline,
            (false, None) => ChunkType::LongCall,
            (false, Some(_)) => ChunkType::ReadList,
        };
        trace::svc_call(xid, vers, rtype as u32, inline.map_or(0, |c| c.len() as u32));
        // Data items in Read chunks (RDMA_MSG), or the whole call in a
        // position-zero one (RDMA_NOMSG, a Long Call): checked and
        // planned now, pulled once the Receive is back.
        if !chunks.reads.is_empty() {
            return self.pull(xid, chunks, inline);
        }
        // RDMA_NOMSG without a call in it.
        let Some(call) = inline else { return Taken::ErrChunk(xid) };
        // The Write list says where result payloads go, the Reply chunk
        // where a reply too long to send inline goes (RFC 5666 section
        // 5.2): kept for `sendto`, which sends what fits inline all the
        // same.
        let kept = if chunks.writes.is_empty() && chunks.reply.is_none() {
            None
        } else {
            // No read list here: its handles are none.
            match CallChunks::of(chunks, OneHandle::default(), self.spare_chunks()) {
                Some(k) => Some(k),
                // Too many chunks or segments, or no memory to keep them.
                None => return Taken::ErrChunk(xid),
            }
        };
        match rq.set_call(call) {
            Ok(()) => {
                if let Some(k) = kept {
                    rq.set_ctxt(k);
                }
                Taken::Call
            }
            // Empty, or larger than a thread takes.
            Err(_) => Taken::ErrChunk(xid),
        }
    }

    /// A call with Read chunks, for [`Pull::start`]; ERR_CHUNK for chunks
    /// it cannot carry.
    fn pull(&self, xid: u32, chunks: &v1::Chunks<'_>, inline: Option<&[u8]>) -> Taken {
        match Pull::of(xid, chunks, inline, self) {
            Some(p) => Taken::Pull(p),
            None => Taken::ErrChunk(xid),
        }
    }

    /// A Send completed: a reply waiting for a buffer may try again.
    pub(super) fn send_done(&self, _how: Completion) {
        self.sends_freed();
    }

    /// Send buffers came back.
    pub(super) fn sends_freed(&self) {
        // Bumped before the waiters are counted, as a waiter counts itself
        // before it checks (both sequentially consistent): either it sees
        // the bump, or this sees it waiting and wakes it, after it is on
        // the wait queue (it checks and sleeps with the lock held).
        self.sends_back.fetch_add(1, Ordering::SeqCst);
        if self.send_waiters.load(Ordering::SeqCst) != 0 {
            self.wake_send_waiters();
        }
    }

    /// Wakes the threads waiting for a Send buffer, once each waiting is
    /// asleep or past its check.
    fn wake_send_waiters(&self) {
        drop(self.send_lock.lock());
        self.send_wait.notify_all();
    }

    /// Waits until a Send buffer may have come back since `seen` (as
    /// [`ConnState::sends_seen`] read it), for at most `ms`.
    pub(super) fn wait_sends(&self, seen: u64, ms: u32) -> Result {
        let mut left = crate::kapi::time::ms_to_jiffies(ms);
        let mut g = self.send_lock.lock();
        self.send_waiters.fetch_add(1, Ordering::SeqCst);
        let mut waited = Ok(());
        while self.sends_back.load(Ordering::SeqCst) == seen && left > 0 && !self.detached.load(Ordering::SeqCst) {
            waited = crate::kapi::time::wait_timeout(&self.send_wait, &mut g, &mut left);
            if waited.is_err() {
                break;
            }
        }
        self.send_waiters.fetch_sub(1, Ordering::SeqCst);
        drop(g);
        waited?;
        if self.sends_back.load(Ordering::SeqCst) == seen {
            return Err(crate::kapi::errno::ETIMEDOUT());
        }
        Ok(())
    }

    /// How many times Send buffers came back so far.
    pub(super) fn sends_seen(&self) -> u64 {
        self.sends_back.load(Ordering::SeqCst)
    }

    /// The core took the transport down: no more calls are held, and the
    /// connection `conn` is asked to go.
    pub(super) fn detach(&self, conn: Option<&Connection<ServerXprt>>) {
        self.detached.store(true, Ordering::SeqCst);
        // The backchannel's calls fail from now on (the core closes its
        // transport next); it is SUNRPC's to free.
        let bc = self.bc.lock().take();
        drop(bc);
        self.wake_send_waiters();
        if let Some(c) = conn {
            c.disconnect();
        }
    }

    /// The core let go of the transport and gave `attached`, its
    /// connection, back: the held Receives go back, and the connection
    /// goes (its teardown sleeps).
    pub(super) fn free(&self, attached: Option<Arc<Connection<ServerXprt>>>) {
        self.detach(attached.as_deref());
        let kept = self.conn.lock().take();
        // The same connection.
        let conn = attached.or(kept);
        loop {
            let h = self.calls.lock().held.pop();
            let Some(h) = h else { break };
            if let Some(c) = &conn {
                // Of this connection: never refused.
                let _ = c.release_held(h);
            }
        }
        // Those waiting for their batch.
        if let Some(c) = &conn {
            let mut q = self.reposts.lock();
            let _ = c.release_held_many(|| q.pop());
        }
        // Calls being pulled are lost: the tokens of their Reads and
        // Receives go with them, and the connection's teardown ends the
        // Reads once its queue pair is drained and takes the Receives
        // back.
        while let Some(p) = self.calls.lock().pulls.pop() {
            drop(p);
        }
        drop(conn);
    }
}
