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
//! queue pair drained.

use core::{
    marker::PhantomData,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{
        code::{EBUSY, EINVAL},
        Error, Result,
    },
    new_condvar,
    prelude::*,
    sync::CondVar,
    types::Opaque,
};

use super::{
    buf::{Copying, Fill},
    conn::Conn,
    cq::Completion,
    events::Events,
    frwr::Sent,
    qp::Qp,
    sq::{Chain, PostFailed},
};
use crate::{
    kapi::{
        errno,
        page::{self, in_page, Dir, Outbound, PageRef, ANY_OWNER},
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

/// An R/W operation prepared on a connection, not posted: post it
/// ([`Conn::rw_post`]), chain it ahead of a Send
/// ([`Conn::send_after_writes`]) or discard it ([`Conn::rw_discard`]).
///
/// # Invariants
///
/// Names operation `index` of the table of the connection numbered
/// `conn`, prepared and not posted, which takes `wrs` send queue work
/// requests; only consuming the token posts or destroys it. Only kapi
/// makes one.
#[must_use = "a prepared R/W operation holds pages and contexts: post or discard it"]
pub(crate) struct RwChunk<D: Dir> {
    conn: u64,
    index: u16,
    wrs: u32,
    _dir: PhantomData<D>,
}

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
    _dir: PhantomData<D>,
}

/// The table of a connection's R/W operations.
///
/// # Invariants
///
/// Each `Some` entry is an operation whose token (or the Send that
/// carries it) exists, or whose token was lost; entries are emptied only
/// when the operation is destroyed (its contexts first).
pub(super) struct RwTable {
    ops: KVec<Option<Pin<KBox<RwOp>>>>,
    /// Where the search for an empty entry starts: the one last emptied
    /// (a hint, any value works).
    hint: usize,
}

impl RwTable {
    pub(super) const fn new() -> Self {
        RwTable { ops: KVec::new(), hint: 0 }
    }

    /// Puts `op` in an empty entry, the one last emptied if it still is,
    /// and returns its index; `op` back if every entry is taken.
    fn insert(&mut self, op: Pin<KBox<RwOp>>) -> core::result::Result<usize, Pin<KBox<RwOp>>> {
        let n = self.ops.len();
        let start = if self.hint < n { self.hint } else { 0 };
        let found = Iterator::chain(start..n, 0..start).find(|&i| self.ops.get(i).is_some_and(Option::is_none));
        match found.and_then(|i| Some((i, self.ops.get_mut(i)?))) {
            Some((i, e)) => {
                *e = Some(op);
                self.hint = i.wrapping_add(1);
                Ok(i)
            }
            None => Err(op),
        }
    }

    /// Takes operation `index` out, if there is one.
    fn remove(&mut self, index: usize) -> Option<Pin<KBox<RwOp>>> {
        let op = self.ops.get_mut(index).and_then(Option::take);
        if op.is_some() {
            self.hint = index;
        }
        op
    }

    /// Room for `n` operations at once.
    pub(super) fn with_room(n: usize) -> Result<Self> {
        let mut ops = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            ops.push(None, GFP_KERNEL)?;
        }
        Ok(RwTable { ops, hint: 0 })
    }

    /// The operations left, for the teardown.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Pin<KBox<RwOp>>> + '_ {
        self.ops.iter_mut().filter_map(Option::take)
    }
}

/// One R/W operation: its contexts (one per segment), its scatterlist and
/// completion. Boxed and pinned: the device reports the CQE's address.
///
/// # Invariants
///
/// The first `refs` entries of `sg` hold a page reference each. The first
/// `inited` contexts were initialised by `rdma_rw_ctx_init` over the
/// ranges `ranges` of `sg` on the connection's queue pair (which maps
/// them), and are destroyed (unmapping them) before the entries' pages are
/// let go and before the queue pair is.
#[pin_data(PinnedDrop)]
pub(super) struct RwOp {
    /// Written once; ib_core reads it when the last work request completes.
    cqe: sys::ib_cqe,
    ctxs: KVec<Opaque<sys::rdma_rw_ctx>>,
    ranges: KVec<(usize, u32)>,
    sg: KVec<sys::scatterlist>,
    refs: usize,
    inited: usize,
    inbound: bool,
    /// The owner's, handed back with the completion.
    cookie: u64,
    /// Set (under the connection's wait lock) by the completion.
    done: AtomicBool,
    status: AtomicU32,
    /// Woken by the completion, with the connection's wait lock held: the
    /// thread waiting for this operation alone, not every thread waiting
    /// on the connection.
    #[pin]
    done_wait: CondVar,
}

// SAFETY: the contexts and scatterlist are the operation's own, reached by
// the device only while posted (and by the completion, which sets the
// atomics); the pages are held by references of their own.
unsafe impl Send for RwOp {}
// SAFETY: see `Send`; shared use reads the atomics.
unsafe impl Sync for RwOp {}

impl RwOp {
    fn dma_dir(&self) -> sys::dma_data_direction {
        if self.inbound {
            sys::dma_data_direction_DMA_FROM_DEVICE
        } else {
            sys::dma_data_direction_DMA_TO_DEVICE
        }
    }

    /// Destroys the initialised contexts (unmapping their pages). Then the
    /// value may go, dropping the page references.
    ///
    /// # Safety
    ///
    /// `qp` is the queue pair the contexts were made on, and none of their
    /// work requests is posted (completed, flushed, or never posted).
    pub(super) unsafe fn destroy(self: Pin<&mut Self>, qp: &Qp) {
        // SAFETY: nothing is moved out of the pinned value.
        let this = unsafe { self.get_unchecked_mut() };
        let dir = this.dma_dir();
        let n = core::mem::replace(&mut this.inited, 0);
        for (ctx, &(start, count)) in this.ctxs.iter().zip(this.ranges.iter()).take(n) {
            let sg = this.sg.as_mut_ptr().wrapping_add(start);
            // SAFETY: initialised over these entries on `qp`, not posted
            // (the contract); destroyed once (`inited` is 0 from now on).
            unsafe { sys::rdma_rw_ctx_destroy(ctx.get(), qp.as_ptr(), qp.port_num(), sg, count, dir) };
        }
    }
}

#[pinned_drop]
impl PinnedDrop for RwOp {
    fn drop(self: Pin<&mut Self>) {
        for e in self.sg.iter().take(self.refs) {
            // SAFETY: the entry holds the reference its preparation took
            // (type invariant); its context was destroyed, or never made,
            // so the device is done with the page.
            unsafe { page::put(super::sg::page(e)) };
        }
    }
}

impl<V: Events> Conn<V> {
    /// Prepares an R/W operation over the peer's segments `segs` and their
    /// local pages: an RDMA Write of `Outbound` pages, or an RDMA Read
    /// into `Inbound` ones. `cookie` comes back with its completion
    /// ([`Events::rw_done`]). Sleeps (allocates). Fails with `EBUSY` when
    /// the connection has as many operations as it was made for.
    pub(crate) fn rw_prepare<D: Dir>(&self, segs: &[RwSeg<'_, '_, D>], cookie: u64) -> Result<RwChunk<D>> {
        let qp = self.qp()?;
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
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
        let mut sg = KVec::from_elem(sys::scatterlist::default(), npages, GFP_KERNEL)?;
        // SAFETY: `sg` has `npages` entries.
        unsafe { sys::sg_init_table(sg.as_mut_ptr(), u32::try_from(npages).map_err(|_| EINVAL)?) };
        let mut ctxs = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
        let mut ranges = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
        for _ in segs {
            ctxs.push(Opaque::uninit(), GFP_KERNEL)?;
        }
        let mut op = KBox::pin_init(
            pin_init!(RwOp {
                cqe: sys::ib_cqe { done: Some(rw_done::<V>) },
                ctxs,
                ranges: KVec::new(),
                sg,
                refs: 0,
                inited: 0,
                inbound: D::INBOUND,
                cookie,
                done: AtomicBool::new(false),
                status: AtomicU32::new(0),
                done_wait <- new_condvar!("rpcrdma_rs:rw_done"),
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: nothing is moved out of the pinned box: fields are
        // written in place.
        let o = unsafe { op.as_mut().get_unchecked_mut() };
        let mut at = 0usize;
        for s in segs {
            let start = at;
            for &(page, offset, len) in s.pages {
                if len == 0 || !in_page(offset, len) {
                    return Err(EINVAL);
                }
                let e = o.sg.get_mut(at).ok_or(EINVAL)?;
                let p = page.get().ok_or(EINVAL)?;
                super::sg::set_page(e, p, len, offset);
                // INVARIANT: the entry holds the reference just taken.
                o.refs += 1;
                at += 1;
            }
            // Each segment's entries end with the end mark: a walk of one
            // stops there.
            if let Some(last) = at.checked_sub(1).and_then(|i| o.sg.get_mut(i)) {
                super::sg::mark_end(last);
            }
            ranges.push((start, s.pages.len() as u32), GFP_KERNEL)?;
        }
        o.ranges = ranges;
        let dir = o.dma_dir();
        let mut wrs: u32 = 0;
        for (i, s) in segs.iter().enumerate() {
            let (start, count) = *o.ranges.get(i).ok_or(EINVAL)?;
            let ctx = o.ctxs.get(i).ok_or(EINVAL)?.get();
            let sg = o.sg.as_mut_ptr().wrapping_add(start);
            // SAFETY: `ctx` is this operation's (uninitialised) context;
            // the entries hold live pages (references of the operation's);
            // the QP is live. The call DMA-maps the entries.
            let ret = unsafe { sys::rdma_rw_ctx_init(ctx, qp.as_ptr(), qp.port_num(), sg, count, 0, s.addr, s.rkey, dir) };
            if ret < 0 {
                // SAFETY: the contexts made so far are not posted.
                unsafe { op.as_mut().destroy(qp) };
                return Err(Error::from_errno(ret));
            }
            // INVARIANT: one more context initialised.
            o.inited += 1;
            wrs = wrs.saturating_add(ret as u32);
        }
        let inserted = self.rw.lock().insert(op);
        let index = match inserted {
            Ok(i) => i,
            Err(mut op) => {
                // SAFETY: never posted.
                unsafe { op.as_mut().destroy(qp) };
                return Err(EBUSY);
            }
        };
        // INVARIANT: in the table at `index`, prepared, not posted.
        Ok(RwChunk { conn: self.conn_id(), index: index as u16, wrs, _dir: PhantomData })
    }

    /// Chains the work requests of operation `index` (all its contexts, in
    /// order) in front of `next`, or, with no `next`, with its last one
    /// signalled and completing on its CQE. Returns the chain's head.
    fn rw_chain(&self, index: u16, next: Option<*mut sys::ib_send_wr>) -> Result<*mut sys::ib_send_wr> {
        let qp = self.qp()?;
        let t = self.rw.lock();
        let op = t.ops.get(usize::from(index)).and_then(Option::as_ref).ok_or(EINVAL)?;
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
        let head = match self.rw_chain(c.index, None) {
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
        Ok(RwPosted { conn: c.conn, index: c.index, wrs: c.wrs, _dir: PhantomData })
    }

    /// Waits until `p` completes, then destroys it (its pages go back to
    /// their owner): how it went. Sleeps; the wait is bounded by the
    /// queue pair's retry limit (a dead connection flushes every work
    /// request). A token of another connection comes back.
    pub(crate) fn rw_wait<D: Dir>(&self, p: RwPosted<D>) -> core::result::Result<Completion, RwPosted<D>> {
        let Ok(qp) = self.qp() else { return Err(p) };
        if p.conn != self.conn_id() {
            return Err(p);
        }
        let op = {
            let t = self.rw.lock();
            match t.ops.get(usize::from(p.index)).and_then(Option::as_ref) {
                Some(op) => ptr::from_ref::<RwOp>(op),
                None => return Err(p),
            }
        };
        // SAFETY: the operation stays in the table (pinned) until this
        // token ends it below; only its atomics are read.
        let op = unsafe { &*op };
        let mut g = self.inv_lock.lock();
        while !op.done.load(Ordering::Acquire) {
            op.done_wait.wait(&mut g);
        }
        drop(g);
        let how = match op.status.load(Ordering::Relaxed) {
            sys::ib_wc_status_IB_WC_SUCCESS => Completion::Ok,
            sys::ib_wc_status_IB_WC_WR_FLUSH_ERR => Completion::Flushed,
            s => Completion::Failed(s),
        };
        self.rw_end(qp, p.index);
        self.unreserve_wrs(p.wrs as usize);
        Ok(how)
    }

    /// True once `p` completed (or was flushed): [`Conn::rw_wait`] then
    /// returns at once. False for a token of another connection.
    pub(crate) fn rw_completed<D: Dir>(&self, p: &RwPosted<D>) -> bool {
        if p.conn != self.conn_id() {
            return false;
        }
        let t = self.rw.lock();
        t.ops.get(usize::from(p.index)).and_then(Option::as_ref).is_some_and(|op| op.done.load(Ordering::Acquire))
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
        self.rw.lock().ops.iter().filter(|e| e.is_some()).count()
    }

    /// Takes operation `index` out of the table and destroys it. The
    /// caller consumed its token, and none of its work requests is posted.
    pub(super) fn rw_end(&self, qp: &Qp, index: u16) {
        let op = self.rw.lock().remove(usize::from(index));
        if let Some(mut op) = op {
            // SAFETY: made on this connection's queue pair; not posted (the
            // caller's word, from the token it consumed).
            unsafe { op.as_mut().destroy(qp) };
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
        let chain = RwChain { conn: self, index, linked: &linked };
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
    index: u16,
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
        let head = self.conn.rw_chain(self.index, Some(send)).ok()?;
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
unsafe extern "C" fn rw_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
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
    op.done.store(true, Ordering::Release);
    // Woken before the unlock, after which the waiter may destroy the op
    // (its wait included): nothing of it is touched after.
    op.done_wait.notify_all();
    drop(g);
    if how == Completion::Flushed {
        conn.note_flushed();
    }
    conn.events.rw_done(cookie, how);
}

