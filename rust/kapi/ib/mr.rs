// SPDX-License-Identifier: GPL-2.0

//! Fast-registration memory regions (`struct ib_mr` of type MEM_REG) and
//! the tokens that say who may reach them.
//!
//! A region is idle (its connection's free list has its index), leased to
//! the thread registering it, or handed off to a [`Registration`] and then
//! a [`PostedRegistration`]: the only ways back are invalidation, giving an
//! unposted registration back, or the connection's teardown, which
//! deregisters every region after its queue pair is gone.

use core::{
    pin::Pin,
    ptr,
    sync::atomic::{AtomicBool, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{code::EINVAL, from_err_ptr, Result},
};

use super::{device::Device, pd::Pd};
use crate::{
    kapi::{
        cell::LeaseCell,
        compat,
        page::{in_page, PageRef},
    },
    sys,
};

/// Most memory regions one registration token holds.
pub(crate) const MAX_MRS: usize = 8;

/// The signature of a work request's completion function.
pub(super) type DoneFn = unsafe extern "C" fn(*mut sys::ib_cq, *mut sys::ib_wc);

/// A fast-registration memory region and its two work requests.
///
/// # Invariants
///
/// `state.ibmr` was allocated by [`FrMr::new`] in a PD on `device`; both
/// outlive this value (the contract of `new`). The entries `0..mapped` of
/// `state.sg` are DMA-mapped on `device` in direction `to_device`.
/// `virt_dma` is `device`'s [`Device::uses_virt_dma`].
pub(crate) struct FrMr {
    /// Written once; ib_core reads them when the work requests complete.
    pub(super) reg_cqe: sys::ib_cqe,
    pub(super) inv_cqe: sys::ib_cqe,
    /// Set by the LOCAL_INV completion.
    pub(super) inv_done: AtomicBool,
    pub(super) inv_ok: AtomicBool,
    pub(super) index: u16,
    device: *mut sys::ib_device,
    /// The device's DMA is done in software: unmapping does nothing.
    virt_dma: bool,
    /// Held by the free list, by `register` while it maps the region, then
    /// (handed off) by the [`Registration`] that owns the region until
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
/// their `next` is null or a request of a chain being posted.
pub(super) struct MrState {
    pub(super) ibmr: *mut sys::ib_mr,
    pub(super) sg: KVec<sys::scatterlist>,
    /// Scatterlist entries DMA-mapped (0: not mapped).
    pub(super) mapped: u32,
    pub(super) to_device: bool,
    pub(super) reg_wr: sys::ib_reg_wr,
    pub(super) inv_wr: sys::ib_send_wr,
}

impl MrState {
    /// Unmaps the scatterlist entries mapped for the last registration,
    /// once. On a device whose DMA is done in software (`virt_dma`) there
    /// is nothing to undo, as in `ib_dma_unmap_sg`.
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
            unsafe { sys::rpcrdma_rs_dma_unmap_sg(device, self.sg.as_mut_ptr(), n as i32, self.to_device) };
        }
    }
}

// SAFETY: `ibmr` is an ib_core region only this state's holder uses; the work
// requests point at the region's own CQEs (in the same pinned `FrMr`) or at
// requests of a chain being posted (type invariant). Giving the state to
// another thread moves none of these.
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
        let index = u16::try_from(index).map_err(|_| EINVAL)?;
        let n = pages as usize;
        // Zeroed by `sg_init_table`, not entry by entry here: a region is
        // made while calls wait for one (`regions.rs`), and its table has
        // up to 256 entries.
        let mut sg = KVec::<sys::scatterlist>::with_capacity(n, GFP_KERNEL)?;
        // SAFETY: the allocation has room for `n` entries; the call zeroes
        // them all and marks the last as the end.
        unsafe { sys::sg_init_table(sg.as_mut_ptr(), pages) };
        // SAFETY: the first `n` entries are initialised just above (a
        // `scatterlist` is plain C data; zero and the end mark are valid).
        unsafe { compat::kvec_add_initialised(&mut sg, n) };
        // SAFETY: the PD is live.
        let ibmr = from_err_ptr(unsafe { sys::ib_alloc_mr(pd.as_ptr(), sys::ib_mr_type_IB_MR_TYPE_MEM_REG, pages) })?;
        // INVARIANT: allocated just above in `pd`, nothing mapped; the
        // caller keeps the device and PD alive. From here on `Drop`
        // deregisters it.
        let mr = KBox::pin(
            FrMr {
                reg_cqe: sys::ib_cqe { done: Some(reg_done) },
                inv_cqe: sys::ib_cqe { done: Some(inv_done) },
                inv_done: AtomicBool::new(false),
                inv_ok: AtomicBool::new(false),
                index,
                device: device.as_ptr(),
                virt_dma: device.uses_virt_dma(),
                cell: LeaseCell::new(MrState {
                    ibmr,
                    sg,
                    mapped: 0,
                    to_device: false,
                    reg_wr: Default::default(),
                    inv_wr: Default::default(),
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

    /// Unmaps the scatterlist entries mapped for the last registration.
    /// The caller holds the state (a lease taken back from the token that
    /// owned the region) and the HCA is done with the region: it was
    /// invalidated, never posted, or its queue pair is gone.
    #[inline(always)]
    pub(super) fn unmap(&self, m: &mut MrState) {
        // SAFETY: the entries were mapped on `device` (type invariant); the
        // HCA is done with them (above).
        unsafe { m.unmap(self.device, self.virt_dma) };
    }

    /// DMA-maps the first `n` entries of the scatterlist (set to live
    /// pages) in direction `to_device`; returns the entries mapped, or 0 or
    /// less on failure. A device whose DMA is done in software is asked
    /// directly, as `ib_dma_map_sg` does, without a call to get there.
    #[inline(always)]
    fn map_sg(&self, m: &mut MrState, n: usize, to_device: bool) -> i32 {
        let sg = m.sg.as_mut_ptr();
        #[cfg(CONFIG_INFINIBAND_VIRT_DMA)]
        if self.virt_dma {
            // SAFETY: the entries are set to live pages (the caller's
            // contract); the device is live (type invariant).
            return unsafe { sys::ib_dma_virt_map_sg(self.device, sg, n as i32) };
        }
        // SAFETY: as above.
        unsafe { sys::rpcrdma_rs_dma_map_sg(self.device, sg, n as i32, to_device) }
    }

    /// Maps the `n` entries `fill` set, into the region, and gives it a new
    /// key; returns the wire segment. The caller holds the state.
    #[inline(always)]
    pub(super) fn map(&self, m: &mut MrState, n: usize, to_device: bool, xid: u32) -> Result<Registered> {
        let last = n.checked_sub(1).and_then(|i| m.sg.get_mut(i)).ok_or(EINVAL)?;
        super::sg::mark_end(last);
        let nents = self.map_sg(m, n, to_device);
        if nents <= 0 {
            return Err(kernel::error::code::EIO);
        }
        // INVARIANT: `n` entries are mapped in direction `to_device`.
        m.mapped = n as u32;
        m.to_device = to_device;
        let mapped = {
            // SAFETY: the MR is ours (the caller's lease); `nents` entries
            // are mapped.
            unsafe { sys::ib_map_mr_sg(m.ibmr, m.sg.as_mut_ptr(), nents, ptr::null_mut(), crate::kapi::PAGE_SIZE) }
        };
        if mapped != nents {
            // Nothing of the region uses the entries: unmapped at once.
            self.unmap(m);
            return Err(kernel::error::code::EIO);
        }
        // SAFETY: the region is ours (leased) and valid until `Drop`.
        let seg = unsafe {
            let mr = &mut *m.ibmr;
            // The XID in the iova's upper half makes captures readable.
            mr.iova = (mr.iova & 0xffff_ffff) | (u64::from(xid) << 32);
            // A new key for every registration: a late access with an old
            // rkey is refused by the HCA. The key is the low byte of both
            // the lkey and the rkey (`ib_update_fast_reg_key`).
            let key = (mr.rkey & 0xff).wrapping_add(1) & 0xff;
            mr.lkey = (mr.lkey & 0xffff_ff00) | key;
            mr.rkey = (mr.rkey & 0xffff_ff00) | key;
            Registered { handle: mr.rkey, length: mr.length as u32, offset: mr.iova }
        };
        m.reg_wr.wr.next = ptr::null_mut();
        m.reg_wr.key = seg.handle;
        m.reg_wr.access = if to_device {
            sys::ib_access_flags_IB_ACCESS_REMOTE_READ as i32
        } else {
            (sys::ib_access_flags_IB_ACCESS_REMOTE_WRITE | sys::ib_access_flags_IB_ACCESS_LOCAL_WRITE) as i32
        };
        Ok(seg)
    }

    /// The region's current rkey.
    pub(super) fn rkey(m: &MrState) -> u32 {
        // SAFETY: the region is valid until `Drop` (type invariant), and
        // the caller holds its state.
        unsafe { (*m.ibmr).rkey }
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
        // once, and it is deregistered once.
        unsafe {
            m.unmap(device, virt_dma);
            sys::rpcrdma_rs_dereg_mr(m.ibmr);
        }
    }
}

/// Fills the scatterlist of a memory region being registered.
pub(crate) struct SgWriter<'a> {
    pub(super) sg: &'a mut [sys::scatterlist],
    pub(super) n: usize,
}

impl SgWriter<'_> {
    /// Appends `len` bytes at `offset` in `page` (inside the page).
    #[inline]
    pub(crate) fn push(&mut self, page: PageRef<'_>, len: u32, offset: u32) -> Result {
        if !in_page(offset, len) {
            return Err(EINVAL);
        }
        let sg = self.sg.get_mut(self.n).ok_or(EINVAL)?;
        // The page is a live page (`PageRef`) of the RPC's buffer, which
        // the RPC keeps until its regions are invalidated; the bytes are
        // inside it.
        super::sg::set_page(sg, page, len, offset);
        // Below the table's length: the entry exists.
        self.n = self.n.wrapping_add(1);
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

/// The memory regions a registration token holds, and the generation of the
/// connection they belong to (meaningful only while `n > 0`).
pub(super) struct Regions {
    pub(super) generation: u64,
    pub(super) mrs: [u16; MAX_MRS],
    pub(super) n: usize,
}

impl Regions {
    const NONE: Regions = Regions { generation: 0, mrs: [0; MAX_MRS], n: 0 };

    /// Region `index` alone, of the connection `generation`.
    #[inline]
    fn one(generation: u64, index: u16) -> Regions {
        let mut mrs = [0; MAX_MRS];
        mrs[0] = index;
        Regions { generation, mrs, n: 1 }
    }

    /// Moves the regions out, leaving these empty (the rest of an empty
    /// set means nothing, and is left as it is).
    #[inline]
    fn take(&mut self) -> Regions {
        let n = core::mem::replace(&mut self.n, 0);
        Regions { generation: self.generation, mrs: self.mrs, n }
    }

    /// The regions held, in registration order.
    pub(super) fn held(&self) -> &[u16] {
        self.mrs.get(..self.n).unwrap_or(&[])
    }
}

/// Memory regions an RPC registered on one connection whose REG_MR work
/// requests are not posted yet. [`Conn::register`] adds to it; the Send
/// that advertises the regions consumes it ([`Conn::send`]) and returns
/// the [`PostedRegistration`]; a call that is not sent gives the regions
/// back with [`Conn::release_unposted`]. Posting needs the token by value,
/// so its REG_MRs are posted once.
///
/// [`Conn::register`]: super::Conn::register
/// [`Conn::send`]: super::Conn::send
/// [`Conn::release_unposted`]: super::Conn::release_unposted
///
/// # Invariants
///
/// Each region in `0.held()` was handed off to this token by
/// `Conn::register` on the connection of generation `0.generation`, is
/// mapped, and has not been posted; only consuming the token takes it
/// back. The token is not `Clone`, and only kapi makes a non-empty one.
#[must_use = "an unposted registration holds mapped memory regions: send or release it"]
pub(crate) struct Registration(pub(super) Regions);

impl Registration {
    /// A token that holds nothing.
    pub(crate) const fn empty() -> Self {
        Registration(Regions::NONE)
    }
}

/// One memory region an RPC registered on one connection whose REG_MR work
/// request is not posted yet: a [`Registration`] of exactly one region, the
/// usual call's (its only chunk, which one region covers). Made by
/// [`Conn::register_one`]; the Send that advertises it consumes it
/// ([`Conn::send_one`]). Being one index and one generation, not a list,
/// it stays in registers from the registration to the post, and the post
/// chains one REG_MR without a loop. A call that is not sent turns it into
/// a [`Registration`] to give the region back.
///
/// [`Conn::register_one`]: super::Conn::register_one
/// [`Conn::send_one`]: super::Conn::send_one
///
/// # Invariants
///
/// Region `index` was handed off to this token by `Conn::register_one` on
/// the connection of generation `generation`, is mapped, and has not been
/// posted; only consuming the token takes it back. The token is not
/// `Clone`, and only kapi makes one.
#[must_use = "an unposted registration holds a mapped memory region: send or release it"]
pub(crate) struct OneRegistration {
    pub(super) generation: u64,
    pub(super) index: u16,
}

impl From<OneRegistration> for Registration {
    #[inline]
    fn from(one: OneRegistration) -> Self {
        // INVARIANT: the one region, handed off by the same registration
        // and still unposted, is this token's now.
        Registration(Regions::one(one.generation, one.index))
    }
}

/// Memory regions an RPC registered and advertised: the peer may read or
/// write them until [`Conn::invalidate`] consumes the token and returns the
/// [`Invalidated`] proof. A token whose connection is gone holds nothing
/// (the connection released every region when it was torn down, its queue
/// pair first).
///
/// [`Conn::invalidate`]: super::Conn::invalidate
///
/// # Invariants
///
/// As for [`Registration`], except that the regions' REG_MRs were posted.
#[must_use = "the peer can reach these regions until they are invalidated"]
pub(crate) struct PostedRegistration(pub(super) Regions);

impl PostedRegistration {
    /// A token that holds nothing.
    pub(crate) const fn none() -> Self {
        PostedRegistration(Regions::NONE)
    }

    /// Moves the regions out, leaving this token empty.
    #[inline]
    pub(crate) fn take(&mut self) -> PostedRegistration {
        PostedRegistration(self.0.take())
    }

    /// True if it holds no memory region.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.n == 0
    }

    /// Memory regions held.
    pub(crate) fn len(&self) -> usize {
        self.0.n
    }

    /// What the token holds: nothing (most calls' tokens: the proof that
    /// there is nothing the peer could reach), one region (the usual call
    /// with chunks: a token of its own, for
    /// [`Conn::invalidated_remotely`]), or more (the token, for
    /// [`Conn::invalidate`]).
    ///
    /// [`Conn::invalidate`]: super::Conn::invalidate
    /// [`Conn::invalidated_remotely`]: super::Conn::invalidated_remotely
    #[inline]
    pub(crate) fn split(self) -> Holding {
        match self.0.n {
            0 => Holding::Nothing(Invalidated(())),
            // INVARIANT: the token's one region, posted by the same Send,
            // is the new token's.
            1 => Holding::One(OnePostedRegistration { generation: self.0.generation, index: self.0.mrs[0] }),
            _ => Holding::Many(self),
        }
    }
}

/// What a [`PostedRegistration`] holds ([`PostedRegistration::split`]).
pub(crate) enum Holding {
    /// No region: the peer can reach nothing.
    Nothing(Invalidated),
    /// One region, as a token of its own.
    One(OnePostedRegistration),
    /// More than one.
    Many(PostedRegistration),
}

/// The one memory region of a [`PostedRegistration`] that holds one (the
/// usual call's), as a token of its own ([`PostedRegistration::split`]):
/// one index and one generation, which stay in registers through the
/// invalidation ([`Conn::invalidated_remotely`]).
///
/// [`Conn::invalidated_remotely`]: super::Conn::invalidated_remotely
///
/// # Invariants
///
/// As for [`PostedRegistration`], of the one region `index`, registered on
/// the connection of generation `generation`.
#[must_use = "the peer can reach this region until it is invalidated"]
pub(crate) struct OnePostedRegistration {
    pub(super) generation: u64,
    pub(super) index: u16,
}

impl From<OnePostedRegistration> for PostedRegistration {
    #[inline]
    fn from(one: OnePostedRegistration) -> Self {
        // INVARIANT: the one region, posted, is this token's now.
        PostedRegistration(Regions::one(one.generation, one.index))
    }
}

/// Proof that the peer can no longer reach an RPC's memory regions: they
/// were invalidated (or never posted, or their queue pair is in the error
/// state). Made only by [`Conn::invalidate`],
/// [`Conn::invalidated_remotely`], [`Conn::release_unposted`] and
/// [`PostedRegistration::split`] (for a token that holds nothing).
///
/// [`Conn::invalidate`]: super::Conn::invalidate
/// [`Conn::invalidated_remotely`]: super::Conn::invalidated_remotely
/// [`Conn::release_unposted`]: super::Conn::release_unposted
pub(crate) struct Invalidated(pub(super) ());

/// Records a LOCAL_INV completion for the thread waiting on it.
pub(super) fn note_invalidated(mr: &FrMr, ok: bool) {
    mr.inv_ok.store(ok, Ordering::Release);
    mr.inv_done.store(true, Ordering::Release);
}
