// SPDX-License-Identifier: GPL-2.0

//! One R/W operation of [`rw`](super::rw) (`struct rdma_rw_ctx`s, one per
//! segment, over a scatterlist of page references), the connection's
//! table that keeps them, and the pages an RDMA Read fills ([`Sink`]).

use core::{
    pin::Pin,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{code::EINVAL, Error, Result},
    new_condvar,
    prelude::*,
    sync::CondVar,
    types::Opaque,
};

use super::{
    events::Events,
    qp::Qp,
    rw::{rw_done, RwSeg},
};
use crate::{
    kapi::{
        page::{self, in_page, Dir, Inbound, OwnedPages},
        PAGE_SIZE,
    },
    sys,
};

/// Pages for an RDMA Read to fill, allocated not zeroed, owned by the
/// operation made over them ([`RwOp::fill_read`]): nothing reads them
/// (their bytes are whatever the page allocator left in them) until
/// [`Conn::rw_wait_filled`](super::conn::Conn::rw_wait_filled) makes
/// them [`OwnedPages`], once the Read, which writes every byte of
/// `[0, len)`, completed. The rest of the last page is zeroed as it is
/// allocated: no stale byte ever becomes readable.
///
/// # Invariants
///
/// `pages` holds `len.div_ceil(PAGE_SIZE)` pages, at least one; the bytes
/// of the last one past `len` are zero.
pub(super) struct Sink {
    pages: OwnedPages,
    len: u32,
}

impl Sink {
    /// Pages for `len` bytes (not zero). Sleeps.
    fn new(len: u32) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let n = len.div_ceil(PAGE_SIZE) as usize;
        let pages = OwnedPages::new_uninit(n)?;
        let tail = len % PAGE_SIZE;
        if tail != 0 {
            let last = pages.page(n - 1).ok_or(EINVAL)?;
            last.zero(tail as usize, (PAGE_SIZE - tail) as usize)?;
        }
        // INVARIANT: as many pages as `len` takes, the last one's tail
        // zeroed.
        Ok(Sink { pages, len })
    }

    /// The pages, readable: only once a Read filled them.
    fn into_pages(self) -> OwnedPages {
        self.pages
    }
}

/// The table of a connection's R/W operations.
///
/// An entry keeps the operation last ended there, its contexts destroyed
/// and its pages let go, for the next one prepared in it: its box, its
/// vectors and its wait are made once per entry, not once per chunk (as
/// svcrdma keeps its R/W contexts), the scatterlist only up to
/// [`RETAIN_SG`] entries.
///
/// # Invariants
///
/// Each [`Entry::Live`] operation's token (or the Send that carries it)
/// exists, or was lost; an operation leaves that state only when its
/// contexts are destroyed. Until then nothing writes a live operation but
/// its atomics (its completion), and its box stays: its token reads it by
/// address, without the table's lock. An [`Entry::Free`] operation has no context
/// initialised and holds no page.
pub(super) struct RwTable {
    ops: KVec<Entry>,
    /// Where the search for a free entry starts: the one last freed (a
    /// hint, any value works).
    hint: usize,
}

/// An entry of an [`RwTable`].
enum Entry {
    /// Free, with the operation last ended here if it is kept.
    Free(Option<Pin<KBox<RwOp>>>),
    /// Taken out by the thread preparing an operation in it, or ending
    /// one.
    Taken,
    /// Prepared, posted, or carried by a Send not yet complete.
    Live(Pin<KBox<RwOp>>),
}

/// How many scatterlist entries a kept operation holds on to: a 1 MiB
/// chunk's 256 are made again each time.
const RETAIN_SG: usize = 64;

impl RwTable {
    pub(super) const fn new() -> Self {
        RwTable { ops: KVec::new(), hint: 0 }
    }

    /// Takes a free entry, the one last freed if it still is: its index
    /// and the operation kept there, if one. `None` if every entry is
    /// taken.
    pub(super) fn take_free(&mut self) -> Option<(usize, Option<Pin<KBox<RwOp>>>)> {
        let n = self.ops.len();
        let start = if self.hint < n { self.hint } else { 0 };
        let i = Iterator::chain(start..n, 0..start).find(|&i| matches!(self.ops.get(i), Some(Entry::Free(_))))?;
        let e = self.ops.get_mut(i)?;
        self.hint = i.wrapping_add(1);
        match core::mem::replace(e, Entry::Taken) {
            Entry::Free(op) => Some((i, op)),
            // Never: found free above.
            other => {
                *e = other;
                None
            }
        }
    }

    /// Puts the prepared operation `op` in entry `index`, taken by
    /// [`RwTable::take_free`]. An entry not taken is left as it is, and
    /// `op` leaked with whatever it holds (never: only the thread that
    /// took an entry puts it back).
    pub(super) fn put_live(&mut self, index: usize, op: Pin<KBox<RwOp>>) {
        self.put(index, Entry::Live(op));
    }

    /// Frees entry `index`, taken by [`RwTable::take_free`] or
    /// [`RwTable::take_live`], keeping `op` for the next operation if it
    /// is one [`RwOp::kept`] keeps (nothing made on it; its pages are let
    /// go). An entry not taken is left as it is, as for
    /// [`RwTable::put_live`].
    pub(super) fn put_free(&mut self, index: usize, op: Option<Pin<KBox<RwOp>>>) {
        // INVARIANT: a kept operation has no context and holds no page.
        self.put(index, Entry::Free(op.and_then(RwOp::kept)));
        self.hint = index;
    }

    /// Puts `e` in entry `index` if it is taken; else leaks it (whatever
    /// it holds may still be reached by a device).
    fn put(&mut self, index: usize, e: Entry) {
        match self.ops.get_mut(index) {
            Some(slot) if matches!(slot, Entry::Taken) => *slot = e,
            _ => core::mem::forget(e),
        }
    }

    /// Takes live operation `index` out (its entry taken until
    /// [`RwTable::put`]), if there is one.
    pub(super) fn take_live(&mut self, index: usize) -> Option<Pin<KBox<RwOp>>> {
        let e = self.ops.get_mut(index)?;
        match core::mem::replace(e, Entry::Taken) {
            Entry::Live(op) => Some(op),
            other => {
                *e = other;
                None
            }
        }
    }

    /// Room for `n` operations at once.
    pub(super) fn with_room(n: usize) -> Result<Self> {
        let mut ops = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            ops.push(Entry::Free(None), GFP_KERNEL)?;
        }
        Ok(RwTable { ops, hint: 0 })
    }

    /// The live operations left, for the teardown; the kept ones go.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = Pin<KBox<RwOp>>> + '_ {
        self.ops.iter_mut().filter_map(|e| match core::mem::replace(e, Entry::Free(None)) {
            Entry::Live(op) => Some(op),
            _ => None,
        })
    }

    /// How many operations are live.
    pub(super) fn live_count(&self) -> usize {
        self.ops.iter().filter(|e| matches!(e, Entry::Live(_))).count()
    }
}

/// One R/W operation: its contexts (one per segment), its scatterlist and
/// completion, and for an RDMA Read into pages of its own, those pages.
/// Boxed and pinned: the device reports the CQE's address.
///
/// # Invariants
///
/// The first `refs` entries of `sg` hold a page reference each; the
/// entries after them that a context maps name pages of `sinks`, which
/// the operation holds (its `Some` entries, first) until no context maps
/// them (an operation leaked with a context made leaks them too). The
/// first `inited` contexts were initialised by `rdma_rw_ctx_init` over
/// the ranges `ranges` of `sg` (`ctxs` and `ranges` have at least
/// `inited` entries) on the connection's queue pair (which maps them),
/// and are destroyed (unmapping them) before the entries' pages are let
/// go and before the queue pair is. Kept in the table once ended, it is
/// made again over other pages and segments: the vectors only grow (but
/// for a large scatterlist, let go), the box and the wait stay.
#[pin_data(PinnedDrop)]
pub(super) struct RwOp {
    /// Written once; ib_core reads it when the last work request completes.
    pub(super) cqe: sys::ib_cqe,
    pub(super) ctxs: KVec<Opaque<sys::rdma_rw_ctx>>,
    ranges: KVec<Range>,
    sg: KVec<sys::scatterlist>,
    refs: usize,
    /// The pages an RDMA Read made by [`RwOp::fill_read`] fills, one sink
    /// per chunk in order; `None` past them.
    sinks: KVec<Option<Sink>>,
    pub(super) inited: usize,
    inbound: bool,
    /// Its entry in the connection's table.
    pub(super) index: u16,
    /// The owner's, handed back with the completion.
    pub(super) cookie: u64,
    /// Set (under the connection's wait lock) by the completion, the last
    /// it does with the operation: once it reads true, the token's holder
    /// may destroy it.
    pub(super) done: AtomicBool,
    pub(super) status: AtomicU32,
    /// Woken by the completion, with the connection's wait lock held: the
    /// thread waiting for this operation alone, not every thread waiting
    /// on the connection.
    #[pin]
    pub(super) done_wait: CondVar,
}

/// The scatterlist entries of one context (`count` from `start`) and the
/// peer's segment it moves them to or from.
#[derive(Clone, Copy, Default)]
struct Range {
    start: usize,
    count: u32,
    addr: u64,
    rkey: u32,
}

// SAFETY: the contexts and scatterlist are the operation's own, reached by
// the device only while posted (and by the completion, which sets the
// atomics); the pages are held by references of their own, or owned.
unsafe impl Send for RwOp {}
// SAFETY: see `Send`; shared use reads the atomics.
unsafe impl Sync for RwOp {}

impl RwOp {
    /// An operation with nothing made: no context, no page, no entry.
    pub(super) fn new<V: Events>() -> Result<Pin<KBox<Self>>> {
        KBox::pin_init(
            pin_init!(RwOp {
                cqe: sys::ib_cqe { done: Some(rw_done::<V>) },
                ctxs: KVec::new(),
                ranges: KVec::new(),
                sg: KVec::new(),
                refs: 0,
                sinks: KVec::new(),
                inited: 0,
                inbound: false,
                index: 0,
                cookie: 0,
                done: AtomicBool::new(false),
                status: AtomicU32::new(0),
                done_wait <- new_condvar!("rpcrdma_rs:rw_done"),
            }),
            GFP_KERNEL,
        )
    }

    fn dma_dir(&self) -> sys::dma_data_direction {
        if self.inbound {
            sys::dma_data_direction_DMA_FROM_DEVICE
        } else {
            sys::dma_data_direction_DMA_TO_DEVICE
        }
    }

    /// Room for `nsegs` contexts over `nentries` scatterlist entries (the
    /// first `nentries` initialised, none holding a page), in direction
    /// `D`, as operation `index` with `cookie`. `EINVAL` if the operation
    /// holds anything made.
    fn begin<D: Dir>(&mut self, nsegs: usize, nentries: usize, index: u16, cookie: u64) -> Result {
        if self.inited != 0 || self.refs != 0 {
            return Err(EINVAL);
        }
        if let Some(more) = nentries.checked_sub(self.sg.len()).filter(|&m| m > 0) {
            self.sg.extend_with(more, sys::scatterlist::default(), GFP_KERNEL)?;
        }
        if let Some(more) = nsegs.checked_sub(self.ranges.len()).filter(|&m| m > 0) {
            self.ranges.extend_with(more, Range::default(), GFP_KERNEL)?;
        }
        while self.ctxs.len() < nsegs {
            self.ctxs.push(Opaque::uninit(), GFP_KERNEL)?;
        }
        // SAFETY: `sg` has at least `nentries` entries, none holding a
        // page (`refs` is 0) or mapped (`inited` is 0).
        unsafe { sys::sg_init_table(self.sg.as_mut_ptr(), u32::try_from(nentries).map_err(|_| EINVAL)?) };
        self.inbound = D::INBOUND;
        self.index = index;
        self.cookie = cookie;
        // Not posted: the completion, which sets them, comes after the
        // post that follows.
        self.done.store(false, Ordering::Relaxed);
        self.status.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Undoes a preparation that failed part of the way: its contexts
    /// destroyed, its pages let go (its sinks too).
    fn undo(&mut self, qp: &Qp) {
        // SAFETY: the contexts made so far were made on `qp` and are not
        // posted.
        unsafe { self.destroy_ctxs(qp) };
        self.put_pages();
    }

    /// Makes the operation over `segs` (`npages` pieces in all, each
    /// inside its page) on `qp`: each page takes a reference of the
    /// operation's, one context per segment maps the segment's pages.
    /// Returns how many send queue work requests it takes. The operation
    /// must hold nothing made (`EINVAL` otherwise); on a failure it holds
    /// nothing made again.
    pub(super) fn fill<D: Dir>(
        self: Pin<&mut Self>,
        qp: &Qp,
        segs: &[RwSeg<'_, '_, D>],
        npages: usize,
        index: u16,
        cookie: u64,
    ) -> Result<u32> {
        // SAFETY: nothing is moved out of the pinned value: fields are
        // written in place (`done_wait`, the only pinned one, is not
        // touched).
        let o = unsafe { self.get_unchecked_mut() };
        o.begin::<D>(segs.len(), npages, index, cookie)?;
        let made = o.map(segs).and_then(|()| o.init_ctxs(qp, segs.len()));
        if made.is_err() {
            o.undo(qp);
        }
        made
    }

    /// The pages of `segs` into the scatterlist (references taken), and
    /// each segment's range.
    fn map<D: Dir>(&mut self, segs: &[RwSeg<'_, '_, D>]) -> Result {
        let mut at = 0usize;
        for (i, s) in segs.iter().enumerate() {
            let start = at;
            for &(page, offset, len) in s.pages {
                if len == 0 || !in_page(offset, len) {
                    return Err(EINVAL);
                }
                let e = self.sg.get_mut(at).ok_or(EINVAL)?;
                let p = page.get().ok_or(EINVAL)?;
                super::sg::set_page(e, p, len, offset);
                // INVARIANT: the entry holds the reference just taken.
                self.refs += 1;
                at += 1;
            }
            self.end_range(i, start, at, s.addr, s.rkey)?;
        }
        Ok(())
    }

    /// Ends segment `i`'s range, entries `start..end`, against the peer's
    /// `addr` and `rkey`: its last entry marked the end (a walk of one
    /// context's entries stops there).
    #[inline]
    fn end_range(&mut self, i: usize, start: usize, end: usize, addr: u64, rkey: u32) -> Result {
        if let Some(last) = end.checked_sub(1).and_then(|i| self.sg.get_mut(i)) {
            super::sg::mark_end(last);
        }
        let count = u32::try_from(end.wrapping_sub(start)).map_err(|_| EINVAL)?;
        *self.ranges.get_mut(i).ok_or(EINVAL)? = Range { start, count, addr, rkey };
        Ok(())
    }

    /// Makes a context over each of the first `nsegs` ranges. Returns how
    /// many send queue work requests they take.
    fn init_ctxs(&mut self, qp: &Qp, nsegs: usize) -> Result<u32> {
        let dir = self.dma_dir();
        let mut wrs: u32 = 0;
        for i in 0..nsegs {
            let r = *self.ranges.get(i).ok_or(EINVAL)?;
            let end = r.start.checked_add(r.count as usize).ok_or(EINVAL)?;
            if r.count == 0 || end > self.sg.len() {
                return Err(EINVAL);
            }
            let ctx = self.ctxs.get(i).ok_or(EINVAL)?.get();
            let sg = self.sg.as_mut_ptr().wrapping_add(r.start);
            // SAFETY: `ctx` is this operation's context, not initialised
            // (the first `inited` are, and this is the next); the range's
            // entries lie in `sg` (checked) and name live pages
            // (references of the operation's, or its sinks'); the QP is
            // live. The call DMA-maps the entries.
            let ret = unsafe { sys::rdma_rw_ctx_init(ctx, qp.as_ptr(), qp.port_num(), sg, r.count, 0, r.addr, r.rkey, dir) };
            if ret < 0 {
                return Err(Error::from_errno(ret));
            }
            // INVARIANT: one more context initialised.
            self.inited += 1;
            wrs = wrs.saturating_add(ret as u32);
        }
        Ok(wrs)
    }

    /// Makes the operation an RDMA Read of the peer's segments `segs`
    /// (rkey, address, length; those of length 0 skipped) into pages of
    /// its own: one sink per chunk of `chunks` (how many of `segs` are
    /// its, and its length in bytes, not zero), which its segments fill
    /// in order from its start; their lengths must add up to the chunk's,
    /// and every segment that takes bytes must be a chunk's. Returns how
    /// many send queue work requests it takes. As for
    /// [`RwOp::fill`], the operation must hold nothing made, and holds
    /// nothing made after a failure.
    pub(super) fn fill_read<S>(
        self: Pin<&mut Self>,
        qp: &Qp,
        segs: S,
        chunks: &[(usize, u32)],
        index: u16,
        cookie: u64,
    ) -> Result<u32>
    where
        S: Iterator<Item = (u32, u64, u32)> + Clone,
    {
        // SAFETY: as in `fill`.
        let o = unsafe { self.get_unchecked_mut() };
        // Entries: at most each chunk's pages, and one more at each
        // segment's start (a segment may end inside a page).
        let nsegs = segs.clone().filter(|s| s.2 > 0).count();
        let mut nentries = nsegs;
        for &(_, len) in chunks {
            nentries = nentries.checked_add(len.div_ceil(PAGE_SIZE) as usize).ok_or(EINVAL)?;
        }
        if nsegs == 0 || chunks.is_empty() {
            return Err(EINVAL);
        }
        o.begin::<Inbound>(nsegs, nentries, index, cookie)?;
        while o.sinks.len() < chunks.len() {
            o.sinks.push(None, GFP_KERNEL)?;
        }
        // A context per range `map_read` set, and no more: a range past
        // those would be a kept operation's, over entries of other pages.
        let made = o
            .map_read(segs, chunks)
            .and_then(|set| if set == nsegs { Ok(()) } else { Err(EINVAL) })
            .and_then(|()| o.init_ctxs(qp, nsegs));
        if made.is_err() {
            o.undo(qp);
        }
        made
    }

    /// The sinks of `chunks` made, and the pages of each into the
    /// scatterlist as `segs` cut them (no reference taken: the sinks are
    /// the operation's), with each segment's range. Returns how many
    /// ranges it set (segments past the chunks' counts are not read).
    fn map_read<S>(&mut self, mut segs: S, chunks: &[(usize, u32)]) -> Result<usize>
    where
        S: Iterator<Item = (u32, u64, u32)>,
    {
        let (mut at, mut i) = (0usize, 0usize);
        for (k, &(count, len)) in chunks.iter().enumerate() {
            let sink = Sink::new(len)?;
            let ptrs = sink.pages.raw_pages();
            let mut pos = 0u32;
            for (rkey, addr, seg_len) in segs.by_ref().take(count) {
                if seg_len == 0 {
                    continue;
                }
                let end = pos.checked_add(seg_len).filter(|&e| e <= sink.len).ok_or(EINVAL)?;
                let start = at;
                while pos < end {
                    let off = pos % PAGE_SIZE;
                    let n = (end - pos).min(PAGE_SIZE - off);
                    let page = *ptrs.get((pos / PAGE_SIZE) as usize).ok_or(EINVAL)?;
                    super::sg::set_page(self.sg.get_mut(at).ok_or(EINVAL)?, page, n, off);
                    pos += n;
                    at += 1;
                }
                self.end_range(i, start, at, addr, rkey)?;
                i += 1;
            }
            // The chunk's segments fill its sink, every byte of it.
            if pos != sink.len {
                return Err(EINVAL);
            }
            // INVARIANT: the entries set above name the sink's pages, held
            // by the operation from here on.
            *self.sinks.get_mut(k).ok_or(EINVAL)? = Some(sink);
        }
        Ok(i)
    }

    /// Moves the operation's sinks, filled, into `out` (the first chunk's
    /// into the first slot, and so on), as pages to read: once no context
    /// maps them (else nothing is moved). Those `out` has no room for are
    /// let go.
    pub(super) fn take_filled(self: Pin<&mut Self>, out: &mut [Option<OwnedPages>]) {
        // SAFETY: nothing is moved out of the pinned value.
        let o = unsafe { self.get_unchecked_mut() };
        if o.inited != 0 {
            return;
        }
        let mut out = out.iter_mut();
        for s in o.sinks.iter_mut() {
            match (s.take(), out.next()) {
                (Some(sink), Some(slot)) => *slot = Some(sink.into_pages()),
                (Some(sink), None) => drop(sink),
                (None, _) => break,
            }
        }
    }

    /// Destroys the initialised contexts (unmapping their pages). Then the
    /// pages may go.
    ///
    /// # Safety
    ///
    /// `qp` is the queue pair the contexts were made on, and none of their
    /// work requests is posted (completed, flushed, or never posted).
    unsafe fn destroy_ctxs(&mut self, qp: &Qp) {
        let dir = self.dma_dir();
        let n = core::mem::replace(&mut self.inited, 0);
        for (ctx, r) in self.ctxs.iter().zip(self.ranges.iter()).take(n) {
            let sg = self.sg.as_mut_ptr().wrapping_add(r.start);
            // SAFETY: initialised over these entries on `qp`, not posted
            // (the contract); destroyed once (`inited` is 0 from now on).
            unsafe { sys::rdma_rw_ctx_destroy(ctx.get(), qp.as_ptr(), qp.port_num(), sg, r.count, dir) };
        }
    }

    /// Destroys the initialised contexts (unmapping their pages). Then the
    /// value may go, or be kept ([`RwOp::kept`]), letting its pages go.
    ///
    /// # Safety
    ///
    /// As for [`RwOp::destroy_ctxs`].
    pub(super) unsafe fn destroy(self: Pin<&mut Self>, qp: &Qp) {
        // SAFETY: nothing is moved out of the pinned value; the contract
        // is the caller's.
        unsafe { self.get_unchecked_mut().destroy_ctxs(qp) };
    }

    /// Lets the pages go (references and sinks), if no context maps them
    /// any more.
    fn put_pages(&mut self) {
        if self.inited != 0 {
            // A device may still reach them: held for ever rather than
            // let go too soon.
            return;
        }
        for e in self.sg.iter().take(core::mem::replace(&mut self.refs, 0)) {
            // SAFETY: the entry holds the reference its preparation took
            // (type invariant; once: `refs` is 0 from now on); no context
            // maps it, so the device is done with the page.
            unsafe { page::put(super::sg::page(e)) };
        }
        for s in self.sinks.iter_mut() {
            if s.take().is_none() {
                break;
            }
        }
    }

    /// `op`, its contexts destroyed, with its pages let go, to keep for
    /// the next operation; `None` (leaked, its pages held) if a context
    /// is still made.
    fn kept(mut op: Pin<KBox<Self>>) -> Option<Pin<KBox<Self>>> {
        if op.inited != 0 {
            core::mem::forget(op);
            return None;
        }
        // SAFETY: nothing is moved out of the pinned value.
        let o = unsafe { op.as_mut().get_unchecked_mut() };
        o.put_pages();
        if o.sg.len() > RETAIN_SG {
            o.sg = KVec::new();
        }
        Some(op)
    }
}

#[pinned_drop]
impl PinnedDrop for RwOp {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: nothing is moved out of the pinned value.
        let o = unsafe { self.get_unchecked_mut() };
        if o.inited != 0 {
            // A device may still write the sinks: leaked with the rest.
            for s in o.sinks.iter_mut() {
                if let Some(sink) = s.take() {
                    core::mem::forget(sink);
                }
            }
        }
        o.put_pages();
    }
}
