// SPDX-License-Identifier: GPL-2.0

//! RDMA Read and Write of local pages against a peer's registered
//! segments, through the kernel's R/W API (`struct rdma_rw_ctx`): how a
//! server moves the data of Read and Write chunks.
//!
//! An operation covers one chunk: one context per segment, all chained in
//! one post. It is prepared ([`Conn::rw_prepare`]: the pages take
//! references of the operation's, the contexts map them), then either
//! posted alone and waited for ([`Conn::rw_post`], [`Conn::rw_wait`]: an
//! RDMA Read of a call's Read chunk, say) or chained ahead of a Send
//! ([`Conn::send_after_writes`]: a reply's Write chunks, destroyed by the
//! Send's completion). The data moves in the operation's direction: an
//! RDMA Write sends `Outbound` pages, an RDMA Read fills `Inbound` ones.
//! Operations belong to the connection (a table sized for the R/W
//! contexts its queue pair was made for); their tokens name them, and the
//! connection's teardown destroys those whose tokens were lost, after its
//! queue pair drained. The operation itself, the table, and the pages an
//! RDMA Read fills are in `rw_op`.

use core::{
    marker::PhantomData,
    pin::Pin,
    ptr::{self, NonNull},
    sync::atomic::{AtomicU64, Ordering},
};

use kernel::error::{
    code::{EBUSY, EINVAL},
    Error, Result,
};

use super::{
    buf::{Copying, Fill},
    conn::Conn,
    cq::Completion,
    events::Events,
    frwr::Sent,
    qp::Qp,
    rw_op::RwOp,
    sq::{Chain, PostFailed},
};
use crate::{
    kapi::{
        errno,
        page::{Dir, Inbound, Outbound, OwnedPages, PageRef, ANY_OWNER},
    },
    sys,
};

/// One segment of the peer's chunk and the local pages (page, offset,
/// length; each inside its page) its data moves from or into, in order.
pub(crate) struct RwSeg<'a, 'p, D: Dir> {
    /// The peer's rkey.
    pub(crate) rkey: u32,
    /// The peer's address (relative to the rkey).
    pub(crate) addr: u64,
    /// The local pages.
    pub(crate) pages: &'a [(PageRef<'p, D>, u32, u32)],
}

impl<D: Dir> Clone for RwSeg<'_, '_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Dir> Copy for RwSeg<'_, '_, D> {}

/// An R/W operation prepared on a connection, not posted: post it
/// ([`Conn::rw_post`]), chain it ahead of a Send
/// ([`Conn::send_after_writes`]) or discard it ([`Conn::rw_discard`]).
///
/// # Invariants
///
/// Names operation `index` of the table of the connection numbered
/// `conn`, prepared and not posted, which takes `wrs` send queue work
/// requests; only consuming the token posts or destroys it. `op` is that
/// operation, pinned in the table's entry until the token (or the Send it
/// was chained ahead of) ends it, and not written meanwhile but for its
/// atomics. Only kapi makes one.
#[must_use = "a prepared R/W operation holds pages and contexts: post or discard it"]
pub(crate) struct RwChunk<D: Dir> {
    conn: u64,
    index: u16,
    wrs: u32,
    op: NonNull<RwOp>,
    _dir: PhantomData<D>,
}

// SAFETY: `op` is only read, and only by the connection the token names
// (checked first), while the operation lives (type invariant); `RwOp` is
// `Sync`.
unsafe impl<D: Dir> Send for RwChunk<D> {}
// SAFETY: through a shared token `op` is only read (`rw_chain`), by the
// connection the token names, and the operation's fields are not written
// while the token lives (type invariant); `RwOp` is `Sync`.
unsafe impl<D: Dir> Sync for RwChunk<D> {}

/// Entries of a connection's R/W table whose completion is also told by
/// a bit of [`Conn`]'s `rw_done_bits` (a server's credits' worth); the
/// others' by their operation, under the table's lock.
pub(super) const RW_DONE_BITS: usize = 256;

/// Words of `rw_done_bits`.
pub(super) const RW_DONE_WORDS: usize = RW_DONE_BITS / 64;

/// An R/W operation posted alone: [`Conn::rw_wait`] ends it.
///
/// # Invariants
///
/// As for [`RwChunk`], posted with `wrs` send queue slots reserved.
#[must_use = "the device moves data until the operation completes: wait for it"]
pub(crate) struct RwPosted<D: Dir> {
    conn: u64,
    index: u16,
    wrs: u32,
    op: NonNull<RwOp>,
    _dir: PhantomData<D>,
}

// SAFETY: as for `RwChunk`.
unsafe impl<D: Dir> Send for RwPosted<D> {}
// SAFETY: as for `RwChunk`: `rw_completed` reads the operation's atomics
// only, on the connection the token names.
unsafe impl<D: Dir> Sync for RwPosted<D> {}

impl<V: Events> Conn<V> {
    /// Prepares an R/W operation over the peer's segments `segs` and their
    /// local pages: an RDMA Write of `Outbound` pages, or an RDMA Read
    /// into `Inbound` ones. `cookie` comes back with its completion
    /// ([`Events::rw_done`]). May sleep (allocates the first time an
    /// entry of the connection's table is used, or for more segments or
    /// pages than it kept room for). Fails with `EBUSY` when the
    /// connection has as many operations as it was made for.
    pub(crate) fn rw_prepare<D: Dir>(&self, segs: &[RwSeg<'_, '_, D>], cookie: u64) -> Result<RwChunk<D>> {
        let npages: usize = segs.iter().map(|s| s.pages.len()).sum();
        if segs.is_empty() || npages == 0 || segs.iter().any(|s| s.pages.is_empty()) {
            return Err(EINVAL);
        }
        // An operation is no lender's token: a lender's pages (a request's
        // buffers) would be the lender's again, by its proof, while the
        // operation still reached them. Only unlent pages.
        if segs.iter().flat_map(|s| s.pages.iter()).any(|(p, _, _)| p.owner() != ANY_OWNER) {
            return Err(EINVAL);
        }
        self.rw_make(|op, qp, index| op.fill(qp, segs, npages, index, cookie))
    }

    /// Prepares an RDMA Read of the peer's segments `segs` (rkey, address,
    /// length) into pages the operation allocates and owns: one run of
    /// pages per chunk of `chunks` (how many of `segs` are the chunk's, in
    /// order, and its length in bytes, not zero), filled by the chunk's
    /// segments from its start, whose lengths must add up to the chunk's
    /// (`EINVAL` otherwise). Nothing reads the pages until the Read
    /// completed: [`Conn::rw_wait_filled`] hands them over then. `cookie`
    /// and the rest as for [`Conn::rw_prepare`].
    pub(crate) fn rw_prepare_read<S>(&self, segs: S, chunks: &[(usize, u32)], cookie: u64) -> Result<RwChunk<Inbound>>
    where
        S: Iterator<Item = (u32, u64, u32)> + Clone,
    {
        self.rw_make(|op, qp, index| op.fill_read(qp, segs, chunks, index, cookie))
    }

    /// Takes a free entry of the table and makes an operation there with
    /// `fill` (given the operation, kept or new, holding nothing made;
    /// the queue pair; the entry's index), which returns how many send
    /// queue work requests it takes, or fails holding nothing made.
    #[inline(always)]
    fn rw_make<D: Dir>(&self, fill: impl FnOnce(Pin<&mut RwOp>, &Qp, u16) -> Result<u32>) -> Result<RwChunk<D>> {
        let qp = self.qp()?;
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        let (index, kept) = self.rw.lock().take_free().ok_or(EBUSY)?;
        let Ok(index16) = u16::try_from(index) else {
            // Never: a table has far fewer entries than a token counts.
            self.rw.lock().put_free(index, kept);
            return Err(EINVAL);
        };
        // Not posted: its completion, which sets the bit again, comes
        // after. The last one's there came before it was ended.
        if let Some((word, bit)) = self.rw_done_bit(index16) {
            word.fetch_and(!bit, Ordering::Relaxed);
        }
        let mut op = match kept.map_or_else(RwOp::new::<V>, Ok) {
            Ok(op) => op,
            Err(e) => {
                self.rw.lock().put_free(index, None);
                return Err(e);
            }
        };
        match fill(op.as_mut(), qp, index16) {
            Ok(wrs) => {
                // Pinned: the box stays where it is in the table.
                let at = NonNull::from(&*op);
                self.rw.lock().put_live(index, op);
                // INVARIANT: in the table at `index`, prepared, not posted;
                // written no more until the token ends it.
                Ok(RwChunk { conn: self.conn_id(), index: index16, wrs, op: at, _dir: PhantomData })
            }
            Err(e) => {
                self.rw.lock().put_free(index, Some(op));
                Err(e)
            }
        }
    }

    /// Chains the work requests of the operation `c` names (all its
    /// contexts, in order) in front of `next`, or, with no `next`, with its
    /// last one signalled and completing on its CQE. Returns the chain's
    /// head. `EINVAL` for a token of another connection.
    fn rw_chain<D: Dir>(&self, c: &RwChunk<D>, next: Option<*mut sys::ib_send_wr>) -> Result<*mut sys::ib_send_wr> {
        let qp = self.qp()?;
        if c.conn != self.conn_id() {
            return Err(EINVAL);
        }
        // SAFETY: a token of this connection: the operation is live and
        // pinned in its table, and only read until the token ends it (type
        // invariant of `RwChunk`). No lock: nobody else reaches it.
        let op = unsafe { c.op.as_ref() };
        let cqe = ptr::from_ref(&op.cqe).cast_mut();
        let mut head = next.unwrap_or(ptr::null_mut());
        for ctx in op.ctxs.iter().take(op.inited).rev() {
            // SAFETY: an initialised context of the operation (type
            // invariant), whose token the caller holds; the call only
            // links its work requests (its own allocations) to `head`, or
            // marks the last one signalled with the operation's CQE, which
            // lives until the operation is destroyed.
            head = unsafe {
                sys::rdma_rw_ctx_wrs(
                    ctx.get(),
                    qp.as_ptr(),
                    qp.port_num(),
                    if head.is_null() { cqe } else { ptr::null_mut() },
                    head,
                )
            };
        }
        Ok(head)
    }

    /// Posts `c` alone; its completion ([`Events::rw_done`]) comes when the
    /// last of its work requests does. Fails with `ENOBUFS` when the Send
    /// queue has no room (the owner's policy); then the operation comes
    /// back, to post again or discard. A post that stops part of the way
    /// moves the queue pair to the error state and waits until what was
    /// posted is flushed; the operation comes back then too.
    pub(crate) fn rw_post<D: Dir>(&self, c: RwChunk<D>) -> core::result::Result<RwPosted<D>, (Error, RwChunk<D>)> {
        let qp = match self.qp() {
            Ok(qp) if c.conn == self.conn_id() && !self.dying.load(Ordering::Acquire) => qp,
            _ => return Err((errno::ENOTCONN(), c)),
        };
        let wrs = c.wrs as usize;
        if !self.reserve_wrs(wrs) {
            return Err((errno::ENOBUFS(), c));
        }
        let head = match self.rw_chain(&c, None) {
            Ok(h) => h,
            Err(e) => {
                self.unreserve_wrs(wrs);
                return Err((e, c));
            }
        };
        let posted = if self.events.inject_partial_rw_post() {
            // SAFETY: as below; the chain is built and not posted.
            unsafe { super::sq::post_without_last(qp, head) }
        } else {
            // SAFETY: the chain's work requests are the operation's (its
            // contexts' allocations), live until it is destroyed, which
            // waits for its completion; its pages are held by references.
            unsafe { qp.post_send(head) }
        };
        if let Err(e) = posted {
            if !ptr::eq(e.bad, head.cast_const()) {
                // Part of it is posted, without its signalled last request:
                // nothing will say when the device is done with it but the
                // flush a queue pair in the error state makes.
                self.break_qp();
                qp.drain_sq();
            }
            self.unreserve_wrs(wrs);
            return Err((e.err, c));
        }
        // INVARIANT: posted, with its slots reserved.
        Ok(RwPosted { conn: c.conn, index: c.index, wrs: c.wrs, op: c.op, _dir: PhantomData })
    }

    /// Waits until `p` completes, then destroys it (its pages go back to
    /// their owner): how it went. Sleeps; the wait is bounded by the
    /// queue pair's retry limit (a dead connection flushes every work
    /// request). A token of another connection comes back.
    pub(crate) fn rw_wait<D: Dir>(&self, p: RwPosted<D>) -> core::result::Result<Completion, RwPosted<D>> {
        let (how, index, qp) = self.rw_wait_done(p)?;
        self.rw_end(qp, index);
        Ok(how)
    }

    /// Waits until the RDMA Read `p` (made by [`Conn::rw_prepare_read`])
    /// completes, then destroys it, as [`Conn::rw_wait`] does, and, if it
    /// completed without error, moves the pages of each of its chunks,
    /// filled, into `filled` (the first chunk's into the first slot, and
    /// so on; the slots of chunks it did not have are left as they were).
    /// Its pages are let go otherwise. A token of another connection
    /// comes back.
    pub(crate) fn rw_wait_filled(
        &self,
        p: RwPosted<Inbound>,
        filled: &mut [Option<OwnedPages>],
    ) -> core::result::Result<Completion, RwPosted<Inbound>> {
        let (how, index, qp) = self.rw_wait_done(p)?;
        self.rw_end_with(qp, index, |op| {
            if how == Completion::Ok {
                op.take_filled(filled);
            }
        });
        Ok(how)
    }

    /// Waits until `p` completes, then ends its token: how it went, its
    /// entry, and the queue pair, for the caller to destroy the operation
    /// (nothing of it is posted any more). Its send queue slots are given
    /// back.
    fn rw_wait_done<D: Dir>(&self, p: RwPosted<D>) -> core::result::Result<(Completion, u16, &Qp), RwPosted<D>> {
        let Ok(qp) = self.qp() else { return Err(p) };
        if p.conn != self.conn_id() {
            return Err(p);
        }
        // SAFETY: a token of this connection: the operation stays in the
        // table (pinned) until this token ends it; its atomics are read
        // (type invariant of `RwPosted`).
        let op = unsafe { p.op.as_ref() };
        // Done already (a pull found done): no lock. Its completion sets
        // `done` last, once it touches the operation no more.
        if !op.done.load(Ordering::Acquire) {
            let mut g = self.inv_lock.lock();
            while !op.done.load(Ordering::Acquire) {
                op.done_wait.wait(&mut g);
            }
            drop(g);
        }
        let how = match op.status.load(Ordering::Relaxed) {
            sys::ib_wc_status_IB_WC_SUCCESS => Completion::Ok,
            sys::ib_wc_status_IB_WC_WR_FLUSH_ERR => Completion::Flushed,
            s => Completion::Failed(s),
        };
        self.unreserve_wrs(p.wrs as usize);
        let RwPosted { index, .. } = p;
        Ok((how, index, qp))
    }

    /// The word of `rw_done_bits` holding entry `index`'s bit, and the
    /// bit, if the entry has one.
    fn rw_done_bit(&self, index: u16) -> Option<(&AtomicU64, u64)> {
        let i = usize::from(index);
        let word = self.rw_done_bits.get(i / 64).filter(|_| i < RW_DONE_BITS)?;
        Some((word, 1u64 << (i % 64)))
    }

    /// True once `p` completed (or was flushed): [`Conn::rw_wait`] then
    /// returns at once. False for a token of another connection. Takes no
    /// lock for the table's first [`RW_DONE_BITS`] entries.
    pub(crate) fn rw_completed<D: Dir>(&self, p: &RwPosted<D>) -> bool {
        if p.conn != self.conn_id() {
            return false;
        }
        // The entry's bit, without the table's lock: set by this
        // operation's completion (the token is live, so no other was
        // prepared there since).
        if let Some((word, bit)) = self.rw_done_bit(p.index) {
            return word.load(Ordering::Acquire) & bit != 0;
        }
        // SAFETY: a token of this connection: the operation is live until
        // the token ends it (type invariant of `RwPosted`); its atomic is
        // read.
        unsafe { p.op.as_ref() }.done.load(Ordering::Acquire)
    }

    /// Destroys `c`, never posted. A token of another connection comes
    /// back.
    pub(crate) fn rw_discard<D: Dir>(&self, c: RwChunk<D>) -> core::result::Result<(), RwChunk<D>> {
        match self.qp() {
            Ok(qp) if c.conn == self.conn_id() => {
                self.rw_end(qp, c.index);
                Ok(())
            }
            _ => Err(c),
        }
    }

    /// How many R/W operations the connection holds: prepared, posted, or
    /// carried by a Send not yet complete.
    pub(crate) fn rw_live(&self) -> usize {
        self.rw.lock().live_count()
    }

    /// Destroys operation `index`, its box kept in its entry of the table
    /// for the next. The caller consumed its token, and none of its work
    /// requests is posted.
    pub(super) fn rw_end(&self, qp: &Qp, index: u16) {
        self.rw_end_with(qp, index, |_| ());
    }

    /// Destroys operation `index` as [`Conn::rw_end`] does, then calls
    /// `then` with it (its contexts destroyed, before its pages go).
    #[inline(always)]
    fn rw_end_with(&self, qp: &Qp, index: u16, then: impl FnOnce(Pin<&mut RwOp>)) {
        let index = usize::from(index);
        // One lock round: destroying contexts does not sleep (the teardown
        // does it under this lock too).
        let mut t = self.rw.lock();
        if let Some(mut op) = t.take_live(index) {
            // SAFETY: made on this connection's queue pair; not posted (the
            // caller's word, from the token it consumed).
            unsafe { op.as_mut().destroy(qp) };
            then(op.as_mut());
            t.put_free(index, Some(op));
        }
    }

    /// Sends one message that `fill` copies into a Send buffer, with the
    /// RDMA Writes of `writes` chained in front of it: one post, and the
    /// queue pair's order makes the data land before the peer sees the
    /// message. The Send always asks for its completion, which destroys
    /// the writes (their pages let go): no token comes back and nobody
    /// waits. On a failure the writes come back if they were not yet
    /// linked to the Send; once linked they are destroyed here (after a
    /// post that stopped part of the way, once the queue pair in the
    /// error state is flushed: sleeps then).
    pub(crate) fn send_after_writes(
        &self,
        writes: RwChunk<Outbound>,
        invalidate: Option<u32>,
        fill: impl Fill<Copying>,
    ) -> core::result::Result<Sent, (Error, Option<RwChunk<Outbound>>)> {
        if writes.conn != self.conn_id() {
            return Err((EINVAL, Some(writes)));
        }
        let wrs = (writes.wrs as usize).wrapping_add(1);
        let index = writes.index;
        let linked = core::cell::Cell::new(false);
        let chain = RwChain { conn: self, writes: &writes, linked: &linked };
        match self.post_send(ANY_OWNER, wrs, chain, invalidate, index, fill) {
            Ok(p) => {
                // Posted: the operation is the Send's now, destroyed by its
                // completion.
                let RwChunk { .. } = writes;
                Ok(Sent { signaled: p.signaled, mapped: p.mapped })
            }
            Err(PostFailed { err, partial }) => {
                if !linked.get() {
                    return Err((err, Some(writes)));
                }
                if let Ok(qp) = self.qp() {
                    if partial {
                        // Flushed now: nothing of the writes is posted
                        // after.
                        qp.drain_sq();
                    }
                    self.rw_end(qp, index);
                }
                let RwChunk { .. } = writes;
                Err((err, None))
            }
        }
    }
}

/// The work requests of an R/W operation in front of a Send on `conn`;
/// `linked` says once the operation's last work request names the Send.
struct RwChain<'a, V: Events> {
    conn: &'a Conn<V>,
    writes: &'a RwChunk<Outbound>,
    linked: &'a core::cell::Cell<bool>,
}

// SAFETY: the operation's work requests are its contexts' own allocations,
// live until it is destroyed, which happens only once nothing of it is
// posted (its token is consumed by the caller, who hands it to the Send's
// completion or destroys it after a failed post); it is not posted (the
// token says so). The caller counts its work requests in `wrs`.
unsafe impl<V: Events> Chain for RwChain<'_, V> {
    #[inline(always)]
    fn chain(self, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        let head = self.conn.rw_chain(self.writes, Some(send)).ok()?;
        self.linked.set(true);
        Some(head)
    }
}

/// R/W completion: wakes the thread waiting in [`Conn::rw_wait`] and tells
/// the owner.
///
/// # Safety
///
/// Called by ib_core for the last work request of an R/W operation posted
/// by a [`Conn<V>`].
pub(super) unsafe extern "C" fn rw_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: `cq_context` is the `Conn<V>`, which outlives its CQs; the CQE
    // is the `cqe` of a pinned `RwOp` in its table, which stays until its
    // token ends it, after this completion.
    let (conn, op, wc) = unsafe {
        let conn = &*(*cq).cq_context.cast::<Conn<V>>();
        let wc = &*wc;
        let op = &*wc.__bindgen_anon_1.wr_cqe.cast::<u8>().sub(core::mem::offset_of!(RwOp, cqe)).cast::<RwOp>();
        (conn, op, wc)
    };
    let how = Completion::of(wc);
    let cookie = op.cookie;
    let g = conn.inv_lock.lock();
    op.status.store(wc.status, Ordering::Relaxed);
    // Before `done`: once that is set the entry may be ended and another
    // operation prepared there, which clears the bit.
    if let Some((word, bit)) = conn.rw_done_bit(op.index) {
        word.fetch_or(bit, Ordering::Release);
    }
    // The waiter wakes once the lock is let go, and sees `done` then. Set
    // last: once it is, the waiter may destroy the op (its wait included)
    // without taking the lock, so nothing of it is touched after.
    op.done_wait.notify_all();
    op.done.store(true, Ordering::Release);
    drop(g);
    if how == Completion::Flushed {
        conn.note_flushed();
    }
    conn.events.rw_done(cookie, how);
}

