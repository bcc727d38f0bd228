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
        page::{self, in_page, Dir, Inbound, OwnedPages, PageRef},
        PAGE_SIZE,
    },
    sys,
};

/// Pages for an RDMA Read to fill, allocated not zeroed: nothing reads
/// them (their bytes are whatever the page allocator left in them) until
/// [`Conn::rw_wait_filled`](super::conn::Conn::rw_wait_filled) makes
/// them [`OwnedPages`], once a Read that wrote every byte of `[0, len)`
/// completed. The rest of the last page is zeroed as it is allocated: no
/// stale byte ever becomes readable.
///
/// # Invariants
///
/// `pages` holds `len.div_ceil(PAGE_SIZE)` pages, at least one; the bytes
/// of the last one past `len` are zero.
pub(crate) struct Sink {
    pages: OwnedPages,
    len: u32,
}

impl Sink {
    /// Pages for `len` bytes (not zero). Sleeps.
    pub(crate) fn new(len: u32) -> Result<Self> {
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

    /// The page holding byte `pos` (below the sink's length), the offset
    /// there and how many of the sink's bytes follow in that page: the
    /// local side of a Read into it.
    pub(crate) fn piece(&self, pos: u32) -> Option<(PageRef<'_, Inbound>, u32, u32)> {
        let left = self.len.checked_sub(pos).filter(|&l| l > 0)?;
        let off = pos % PAGE_SIZE;
        let page = self.pages.page((pos / PAGE_SIZE) as usize)?;
        Some((page.page_ref::<Inbound>(), off, (PAGE_SIZE - off).min(left)))
    }

    /// The pages, readable: only for
    /// [`Conn::rw_wait_filled`](super::conn::Conn::rw_wait_filled), once a
    /// Read filled them.
    pub(super) fn into_pages(self) -> OwnedPages {
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
/// completion. Boxed and pinned: the device reports the CQE's address.
///
/// # Invariants
///
/// The first `refs` entries of `sg` hold a page reference each. The first
/// `inited` contexts were initialised by `rdma_rw_ctx_init` over the
/// ranges `ranges` of `sg` (`ctxs` and `ranges` have at least `inited`
/// entries) on the connection's queue pair (which maps them), and are
/// destroyed (unmapping them) before the entries' pages are let go and
/// before the queue pair is. Kept in the table once ended, it is made
/// again over other pages and segments: the vectors only grow (but for a
/// large scatterlist, let go), the box and the wait stay.
#[pin_data(PinnedDrop)]
pub(super) struct RwOp {
    /// Written once; ib_core reads it when the last work request completes.
    pub(super) cqe: sys::ib_cqe,
    pub(super) ctxs: KVec<Opaque<sys::rdma_rw_ctx>>,
    ranges: KVec<(usize, u32)>,
    sg: KVec<sys::scatterlist>,
    refs: usize,
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

// SAFETY: the contexts and scatterlist are the operation's own, reached by
// the device only while posted (and by the completion, which sets the
// atomics); the pages are held by references of their own.
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
        if o.inited != 0 || o.refs != 0 {
            return Err(EINVAL);
        }
        if let Some(more) = npages.checked_sub(o.sg.len()).filter(|&m| m > 0) {
            o.sg.extend_with(more, sys::scatterlist::default(), GFP_KERNEL)?;
        }
        if let Some(more) = segs.len().checked_sub(o.ranges.len()).filter(|&m| m > 0) {
            o.ranges.extend_with(more, (0, 0), GFP_KERNEL)?;
        }
        while o.ctxs.len() < segs.len() {
            o.ctxs.push(Opaque::uninit(), GFP_KERNEL)?;
        }
        // SAFETY: `sg` has at least `npages` entries, none holding a page
        // (`refs` is 0) or mapped (`inited` is 0).
        unsafe { sys::sg_init_table(o.sg.as_mut_ptr(), u32::try_from(npages).map_err(|_| EINVAL)?) };
        o.inbound = D::INBOUND;
        o.index = index;
        o.cookie = cookie;
        // Not posted: the completion, which sets them, comes after the
        // post that follows.
        o.done.store(false, Ordering::Relaxed);
        o.status.store(0, Ordering::Relaxed);
        let made = o.map(qp, segs);
        if made.is_err() {
            // SAFETY: the contexts made so far were made on `qp` and are
            // not posted.
            unsafe { o.destroy_ctxs(qp) };
            o.put_pages();
        }
        made
    }

    /// The pages of `segs` into the scatterlist (references taken), then
    /// one context per segment over its entries.
    fn map<D: Dir>(&mut self, qp: &Qp, segs: &[RwSeg<'_, '_, D>]) -> Result<u32> {
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
            // Each segment's entries end with the end mark: a walk of one
            // stops there.
            if let Some(last) = at.checked_sub(1).and_then(|i| self.sg.get_mut(i)) {
                super::sg::mark_end(last);
            }
            *self.ranges.get_mut(i).ok_or(EINVAL)? = (start, s.pages.len() as u32);
        }
        let dir = self.dma_dir();
        let mut wrs: u32 = 0;
        for (i, s) in segs.iter().enumerate() {
            let (start, count) = *self.ranges.get(i).ok_or(EINVAL)?;
            let ctx = self.ctxs.get(i).ok_or(EINVAL)?.get();
            let sg = self.sg.as_mut_ptr().wrapping_add(start);
            // SAFETY: `ctx` is this operation's context, not initialised
            // (the first `inited` are, and this is the next); the entries
            // hold live pages (references of the operation's); the QP is
            // live. The call DMA-maps the entries.
            let ret = unsafe { sys::rdma_rw_ctx_init(ctx, qp.as_ptr(), qp.port_num(), sg, count, 0, s.addr, s.rkey, dir) };
            if ret < 0 {
                return Err(Error::from_errno(ret));
            }
            // INVARIANT: one more context initialised.
            self.inited += 1;
            wrs = wrs.saturating_add(ret as u32);
        }
        Ok(wrs)
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
        for (ctx, &(start, count)) in self.ctxs.iter().zip(self.ranges.iter()).take(n) {
            let sg = self.sg.as_mut_ptr().wrapping_add(start);
            // SAFETY: initialised over these entries on `qp`, not posted
            // (the contract); destroyed once (`inited` is 0 from now on).
            unsafe { sys::rdma_rw_ctx_destroy(ctx.get(), qp.as_ptr(), qp.port_num(), sg, count, dir) };
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

    /// True if the operation's entries, in order, cover `sink`'s bytes
    /// `[0, len)`: each of its pages from its start, one after the other
    /// (entries of other pages skipped).
    pub(super) fn covers(&self, sink: &Sink) -> bool {
        let ptrs = sink.pages.raw_pages();
        let (mut at, mut page, mut off) = (0u32, 0usize, 0u32);
        for e in self.sg.iter().take(self.refs) {
            if at >= sink.len {
                break;
            }
            let Some(&want) = ptrs.get(page) else { break };
            if super::sg::page(e) == want && e.offset == off {
                at = at.saturating_add(e.length);
                off = off.saturating_add(e.length);
                if off >= PAGE_SIZE {
                    page += 1;
                    off = 0;
                }
            }
        }
        at == sink.len
    }

    /// Lets the pages go, if no context maps them any more.
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
        unsafe { self.get_unchecked_mut() }.put_pages();
    }
}
