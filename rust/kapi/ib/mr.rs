// SPDX-License-Identifier: GPL-2.0

//! Fast-registration memory regions (`struct ib_mr` of type MEM_REG), and
//! the writer that fills one's scatterlist ([`SgWriter`]).
//!
//! A region is idle (its owner's free list has its index), leased to the
//! thread registering it, or handed off to a [`Registration`] and then an
//! [`InFlight`]: the only ways back are invalidation, giving an unposted
//! registration back, or the connection's teardown, which deregisters
//! every region after its queue pair is gone. Every page a registration
//! names holds a page reference of the region's until it is unmapped.
//!
//! [`Registration`]: super::Registration
//! [`InFlight`]: super::InFlight

use core::{
    marker::PhantomData,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicBool, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{
        code::{EINVAL, EIO},
        from_err_ptr, Result,
    },
};

use super::{device::Device, pd::Pd, token::NO_MR};
use crate::{
    kapi::{
        cell::LeaseCell,
        compat,
        page::{self, in_page, Dir, PageRef, PageRun, ANY_OWNER},
    },
    sys,
};

/// The signature of a work request's completion function.
pub(super) type DoneFn = unsafe extern "C" fn(*mut sys::ib_cq, *mut sys::ib_wc);

/// A fast-registration memory region and its two work requests.
///
/// # Invariants
///
/// `state.ibmr` was allocated by [`FrMr::new`] in a PD on `device`; both
/// outlive this value (the contract of `new`). The first `state.refs`
/// entries of `state.sg` hold a page reference each; the entries
/// `0..mapped` are DMA-mapped on `device` in the direction `inbound` says.
/// `virt_dma` is `device`'s [`Device::uses_virt_dma`]. Once `broken` is
/// set the region is never taken back (its queue pair went to the error
/// state with it posted, or its invalidation failed): it stays as it is
/// until the connection's teardown frees it.
pub(crate) struct FrMr {
    /// Written once; ib_core reads them when the work requests complete.
    pub(super) reg_cqe: sys::ib_cqe,
    pub(super) inv_cqe: sys::ib_cqe,
    /// Set by the LOCAL_INV completion.
    pub(super) inv_done: AtomicBool,
    pub(super) inv_ok: AtomicBool,
    /// Kept out of use until the connection goes.
    pub(super) broken: AtomicBool,
    pub(super) index: u16,
    device: *mut sys::ib_device,
    /// The device's DMA is done in software: unmapping does nothing.
    virt_dma: bool,
    /// Held by the owner's free list, by `register` while it maps the
    /// region, then (handed off) by the token that owns the region until
    /// invalidation or `release_unposted` takes it back.
    pub(super) cell: LeaseCell<MrState>,
}

// SAFETY: `device` is only passed to ib_core (which is thread-safe for DMA
// mapping); everything else is atomics, plain data written once, or behind
// the lease cell.
unsafe impl Send for FrMr {}
// SAFETY: see `Send`.
unsafe impl Sync for FrMr {}

/// The contents of a [`FrMr`] that change hands. None of it is read by the
/// device: work requests are copied when posted, and `ib_map_mr_sg` copies
/// the scatterlist's DMA addresses into the region.
///
/// # Invariants
///
/// `ibmr` is the region of the `FrMr` holding this state, used only by the
/// state's holder; the work requests' `wr_cqe` are that `FrMr`'s CQEs, and
/// their `next` is null or a request of a chain being posted. `next` is
/// the next region of the token that holds this one ([`NO_MR`]: the last).
pub(super) struct MrState {
    pub(super) ibmr: *mut sys::ib_mr,
    pub(super) sg: KVec<sys::scatterlist>,
    /// Scatterlist entries holding a page reference.
    refs: u32,
    /// Scatterlist entries DMA-mapped (0: not mapped).
    mapped: u32,
    /// Mapped for the device to write (the peer writes the region).
    inbound: bool,
    pub(super) reg_wr: sys::ib_reg_wr,
    pub(super) inv_wr: sys::ib_send_wr,
    pub(super) next: u16,
}

impl MrState {
    /// Unmaps the scatterlist entries mapped for the last registration and
    /// drops the page references they hold, once. On a device whose DMA is
    /// done in software (`virt_dma`) there is no mapping to undo, as in
    /// `ib_dma_unmap_sg`.
    ///
    /// # Safety
    ///
    /// They were mapped on `device`, and the HCA is done with them;
    /// `virt_dma` is the device's [`Device::uses_virt_dma`].
    #[inline(always)]
    unsafe fn unmap(&mut self, device: *mut sys::ib_device, virt_dma: bool) {
        let n = core::mem::replace(&mut self.mapped, 0);
        if n != 0 && !virt_dma {
            // SAFETY: per the function's contract, for the `n` entries
            // mapped in this direction.
            unsafe { sys::rpcrdma_rs_dma_unmap_sg(device, self.sg.as_mut_ptr(), n as i32, !self.inbound) };
        }
        // SAFETY: the entries hold the references `SgWriter::push` or
        // `push_run` took (type invariant of `FrMr`), given up once here.
        unsafe { self.put_pages() };
    }

    /// Drops the page references of the entries that hold one.
    ///
    /// # Safety
    ///
    /// No entry is DMA-mapped any more, and the device is done with the
    /// pages.
    #[inline(always)]
    unsafe fn put_pages(&mut self) {
        let n = core::mem::replace(&mut self.refs, 0);
        // Most regions hold one page (a 4 KiB read or write): its
        // reference is dropped in place, the rest in one call.
        match (n, self.sg.first()) {
            (0, _) => {}
            // SAFETY: the entry holds the reference `push` or `push_run`
            // took (type invariant of `FrMr`); `refs` is 0 from now on.
            (1, Some(sg)) => unsafe { page::put(super::sg::page(sg)) },
            // SAFETY: as above, for the first `n` entries.
            _ => unsafe { self.put_many(n) },
        }
    }

    /// [`MrState::put_pages`] of `n` entries, `refs` already zeroed: one
    /// call for them all.
    ///
    /// # Safety
    ///
    /// As for [`MrState::put_pages`]; the first `n` entries hold a
    /// reference each, which no one else will drop.
    #[inline]
    unsafe fn put_many(&mut self, n: u32) {
        let n = n.min(self.sg.len() as u32);
        // SAFETY: the first `n` entries (all inside the table) hold the
        // references `push` or `push_run` took (the function's contract).
        unsafe { page::put_sg(self.sg.as_mut_ptr(), n) };
    }
}

// SAFETY: `ibmr` is an ib_core region only this state's holder uses; the work
// requests point at the region's own CQEs (in the same pinned `FrMr`) or at
// requests of a chain being posted, and the scatterlist's pages are held by
// references of their own (type invariant). Giving the state to another
// thread moves none of these.
unsafe impl Send for MrState {}

impl FrMr {
    /// Allocates a region of `pages` pages in `pd`; its REG_MR and
    /// LOCAL_INV completions call `reg_done` and `inv_done`.
    ///
    /// # Safety
    ///
    /// `device` (the PD's) and `pd` must outlive the region, and the
    /// completion functions must accept completions of a `FrMr`'s CQEs.
    pub(super) unsafe fn new(
        device: &Device,
        pd: &Pd,
        pages: u32,
        index: usize,
        reg_done: DoneFn,
        inv_done: DoneFn,
    ) -> Result<Pin<KBox<FrMr>>> {
        let index = u16::try_from(index).ok().filter(|&i| i != NO_MR).ok_or(EINVAL)?;
        let n = pages as usize;
        // Zeroed by `sg_init_table`, not entry by entry here: a region is
        // made while calls wait for one, and its table has up to 256
        // entries.
        let mut sg = KVec::<sys::scatterlist>::with_capacity(n, GFP_KERNEL)?;
        // SAFETY: the allocation has room for `n` entries; the call zeroes
        // them all and marks the last as the end.
        unsafe { sys::sg_init_table(sg.as_mut_ptr(), pages) };
        // SAFETY: the first `n` entries are initialised just above (a
        // `scatterlist` is plain C data; zero and the end mark are valid).
        unsafe { compat::kvec_add_initialised(&mut sg, n) };
        // SAFETY: the PD is live.
        let ibmr = from_err_ptr(unsafe { sys::ib_alloc_mr(pd.as_ptr(), sys::ib_mr_type_IB_MR_TYPE_MEM_REG, pages) })?;
        // INVARIANT: allocated just above in `pd`, nothing mapped or held;
        // the caller keeps the device and PD alive. From here on `Drop`
        // deregisters it.
        let mr = KBox::pin(
            FrMr {
                reg_cqe: sys::ib_cqe { done: Some(reg_done) },
                inv_cqe: sys::ib_cqe { done: Some(inv_done) },
                inv_done: AtomicBool::new(false),
                inv_ok: AtomicBool::new(false),
                broken: AtomicBool::new(false),
                index,
                device: device.as_ptr(),
                virt_dma: device.uses_virt_dma(),
                cell: LeaseCell::new(MrState {
                    ibmr,
                    sg,
                    refs: 0,
                    mapped: 0,
                    inbound: false,
                    reg_wr: Default::default(),
                    inv_wr: Default::default(),
                    next: NO_MR,
                }),
            },
            GFP_KERNEL,
        )?;
        // Pinned, so the CQE addresses stay valid for the WRs; ib_core only
        // reads the CQEs.
        let mut m = mr.cell.lease().ok_or(EINVAL)?;
        m.reg_wr.wr.opcode = sys::ib_wr_opcode_IB_WR_REG_MR;
        m.reg_wr.wr.__bindgen_anon_1.wr_cqe = ptr::from_ref(&mr.reg_cqe).cast_mut();
        m.reg_wr.wr.send_flags = 0;
        m.reg_wr.mr = ibmr;
        m.inv_wr.opcode = sys::ib_wr_opcode_IB_WR_LOCAL_INV;
        m.inv_wr.__bindgen_anon_1.wr_cqe = ptr::from_ref(&mr.inv_cqe).cast_mut();
        drop(m);
        Ok(mr)
    }

    /// Unmaps the scatterlist entries of the last registration and drops
    /// their page references. The caller holds the state (a lease taken
    /// back from the token that owned the region) and the HCA is done with
    /// the region: it was invalidated, never posted, or its queue pair is
    /// gone.
    #[inline(always)]
    pub(super) fn unmap(&self, m: &mut MrState) {
        // SAFETY: the entries were mapped on `device` (type invariant); the
        // HCA is done with them (above).
        unsafe { m.unmap(self.device, self.virt_dma) };
    }

    /// DMA-maps the first `n` entries of the scatterlist (set to live
    /// pages); returns the entries mapped, or 0 or less on failure. A
    /// device whose DMA is done in software is asked directly, as
    /// `ib_dma_map_sg` does, without a call to get there.
    #[inline(always)]
    fn map_sg(&self, m: &mut MrState, n: usize, inbound: bool) -> i32 {
        let sg = m.sg.as_mut_ptr();
        #[cfg(CONFIG_INFINIBAND_VIRT_DMA)]
        if self.virt_dma {
            // SAFETY: the entries are set to live pages (held by their
            // references); the device is live (type invariant).
            return unsafe { sys::ib_dma_virt_map_sg(self.device, sg, n as i32) };
        }
        // SAFETY: as above.
        unsafe { sys::rpcrdma_rs_dma_map_sg(self.device, sg, n as i32, !inbound) }
    }

    /// Registers what `fill` puts in the scatterlist (pages of the lender
    /// `owner`, or owned ones), for the peer to access in direction `D`,
    /// with `tag` in the iova's upper half (it makes captures readable),
    /// and gives the region a new key; returns the wire segment and the
    /// scatterlist entries used. The caller holds the state. On failure
    /// nothing stays mapped or referenced.
    #[inline(always)]
    pub(super) fn map<D: Dir>(
        &self,
        m: &mut MrState,
        owner: u64,
        tag: u32,
        fill: impl FillSg<D>,
    ) -> Result<(Registered, usize)> {
        // The table was initialised when the region was made; `push` and
        // `push_run` set only the entries this registration uses, each
        // with a page reference.
        let mut w = SgWriter { sg: m.sg.as_mut_slice(), n: 0, owner, _dir: PhantomData };
        let filled = fill.fill(&mut w);
        let n = w.n;
        // INVARIANT: the first `n` entries hold the references `push` or
        // `push_run` took.
        m.refs = n as u32;
        if let Err(e) = filled {
            // SAFETY: nothing is mapped; the device never saw the pages.
            unsafe { m.put_pages() };
            return Err(e);
        }
        let Some(last) = n.checked_sub(1).and_then(|i| m.sg.get_mut(i)) else {
            return Err(EINVAL);
        };
        super::sg::mark_end(last);
        let nents = self.map_sg(m, n, D::INBOUND);
        if nents <= 0 {
            // SAFETY: as above: mapping failed.
            unsafe { m.put_pages() };
            return Err(EIO);
        }
        // INVARIANT: `n` entries are mapped in direction `D`.
        m.mapped = n as u32;
        m.inbound = D::INBOUND;
        let (ibmr, sg) = (m.ibmr, m.sg.as_mut_ptr());
        // SAFETY: the MR is ours (the caller's lease); `nents` entries are
        // mapped.
        let mapped = unsafe { sys::ib_map_mr_sg(ibmr, sg, nents, ptr::null_mut(), crate::kapi::PAGE_SIZE) };
        if mapped != nents {
            // Nothing of the region uses the entries: unmapped at once.
            self.unmap(m);
            return Err(EIO);
        }
        let r = m.ibmr;
        // SAFETY: the region is ours (leased) and valid until `Drop`; its
        // fields are written through the pointer, one at a time, as the
        // kernel's own `ib_update_fast_reg_key` does, with nobody else
        // reading them (the region is not posted).
        let seg = unsafe {
            let iova = ptr::addr_of_mut!((*r).iova);
            *iova = (*iova & 0xffff_ffff) | (u64::from(tag) << 32);
            // A new key for every registration: a late access with an old
            // rkey is refused by the HCA. The key is the low byte of both
            // the lkey and the rkey.
            let (lkey, rkey) = (ptr::addr_of_mut!((*r).lkey), ptr::addr_of_mut!((*r).rkey));
            let key = (*rkey & 0xff).wrapping_add(1) & 0xff;
            *lkey = (*lkey & 0xffff_ff00) | key;
            *rkey = (*rkey & 0xffff_ff00) | key;
            Registered { handle: *rkey, length: (*r).length as u32, offset: *iova }
        };
        m.reg_wr.wr.next = ptr::null_mut();
        m.reg_wr.key = seg.handle;
        m.reg_wr.access = if D::INBOUND {
            (sys::ib_access_flags_IB_ACCESS_REMOTE_WRITE | sys::ib_access_flags_IB_ACCESS_LOCAL_WRITE) as i32
        } else {
            sys::ib_access_flags_IB_ACCESS_REMOTE_READ as i32
        };
        Ok((seg, n))
    }

    /// The region's current rkey.
    pub(super) fn rkey(m: &MrState) -> u32 {
        // SAFETY: the region is valid until `Drop` (type invariant), and
        // the caller holds its state; one field is read.
        unsafe { (*m.ibmr).rkey }
    }

    /// Keeps the region out of use until the connection goes: its
    /// registration may be posted with nobody to invalidate it (the queue
    /// pair went to the error state, which makes it unreachable).
    pub(super) fn set_broken(&self) {
        // INVARIANT: set once, never cleared.
        self.broken.store(true, Ordering::Release);
    }

    /// True if the region is kept out of use.
    pub(super) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }
}

impl Drop for FrMr {
    fn drop(&mut self) {
        // Only the owner's teardown drops regions, after their queue pair:
        // nothing reaches them any more.
        let (device, virt_dma) = (self.device, self.virt_dma);
        let m = self.cell.get_mut();
        // SAFETY: the region was allocated in `new` and the device and PD
        // are still live (type invariant); its mapped entries are unmapped
        // and their pages let go once, and it is deregistered once.
        unsafe {
            m.unmap(device, virt_dma);
            sys::rpcrdma_rs_dereg_mr(m.ibmr);
        }
    }
}

/// Fills the scatterlist of a memory region being registered, with pages
/// the peer may access in direction `D`, of one lender (`owner`) or the
/// module's own.
pub(crate) struct SgWriter<'a, D: Dir> {
    sg: &'a mut [sys::scatterlist],
    n: usize,
    owner: u64,
    _dir: PhantomData<D>,
}

impl<D: Dir> SgWriter<'_, D> {
    /// Appends `len` bytes at `offset` in `page` (inside the page), which
    /// must be the registration's lender's or the module's own. The
    /// region takes a reference of the page, dropped when it is unmapped.
    #[inline]
    pub(crate) fn push(&mut self, page: PageRef<'_, D>, len: u32, offset: u32) -> Result {
        if !in_page(offset, len) || (page.owner() != self.owner && page.owner() != ANY_OWNER) {
            return Err(EINVAL);
        }
        let sg = self.sg.get_mut(self.n).ok_or(EINVAL)?;
        let p = page.get().ok_or(EINVAL)?;
        super::sg::set_page(sg, p, len, offset);
        // Below the table's length: the entry exists. INVARIANT: the entry
        // holds the reference just taken.
        self.n = self.n.wrapping_add(1);
        Ok(())
    }

    /// Appends the pages of `run`, `len` bytes in all from `offset` in its
    /// first page: the registration's lender's or the module's own, each
    /// of them touched (`offset + len` bytes take exactly its pages). As
    /// [`push`] for each page, in one call.
    ///
    /// [`push`]: SgWriter::push
    #[inline]
    pub(crate) fn push_run(&mut self, run: PageRun<'_, D>, offset: u32, len: u32) -> Result {
        let n = run.len();
        let touched = u64::from(offset).saturating_add(u64::from(len)).div_ceil(u64::from(crate::kapi::PAGE_SIZE));
        if offset >= crate::kapi::PAGE_SIZE || len == 0 || touched != u64::from(n) {
            return Err(EINVAL);
        }
        if run.owner() != self.owner && run.owner() != ANY_OWNER {
            return Err(EINVAL);
        }
        let sg = self.sg.get_mut(self.n..).filter(|rest| rest.len() >= n as usize).ok_or(EINVAL)?;
        // SAFETY: `sg` has room for `n` entries; `offset` is below
        // `PAGE_SIZE` and `offset + len` bytes span exactly the `n` pages
        // (both checked above).
        let done = unsafe { run.get_into(sg.as_mut_ptr(), offset, len) };
        // At most `n`, which fit. INVARIANT: the entries set hold the
        // references just taken.
        self.n = self.n.wrapping_add(done as usize);
        if done != n {
            return Err(EINVAL);
        }
        Ok(())
    }
}

/// The wire segment (handle, length, offset) of a registered region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registered {
    /// The rkey.
    pub(crate) handle: u32,
    /// Bytes covered.
    pub(crate) length: u32,
    /// The iova.
    pub(crate) offset: u64,
}

/// What describes a region's pages in its [`SgWriter`]: any closure that
/// does, or a value whose [`FillSg::fill`] is `#[inline(always)]`,
/// inlined into the registration whatever its size (see
/// [`Fill`](super::Fill)).
pub(crate) trait FillSg<D: Dir> {
    /// Pushes the region's pages into `w`.
    fn fill(self, w: &mut SgWriter<'_, D>) -> Result;
}

impl<D: Dir, F: FnOnce(&mut SgWriter<'_, D>) -> Result> FillSg<D> for F {
    #[inline(always)]
    fn fill(self, w: &mut SgWriter<'_, D>) -> Result {
        self(w)
    }
}

/// Records a LOCAL_INV completion for the thread waiting on it.
pub(super) fn note_invalidated(mr: &FrMr, ok: bool) {
    mr.inv_ok.store(ok, Ordering::Release);
    mr.inv_done.store(true, Ordering::Release);
}
