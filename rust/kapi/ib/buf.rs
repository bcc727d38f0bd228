// SPDX-License-Identifier: GPL-2.0

//! DMA-mapped Send and Receive buffers, each with its work request
//! ([`DmaBuf`]), and the writer that builds a Send in one
//! ([`SendWriter`]): bytes copied into the buffer, and pages of the Send's
//! lender mapped in place, each holding a page reference until it is
//! unmapped.

use core::{
    marker::PhantomData,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicBool, AtomicU16, AtomicU64},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{
        code::{EINVAL, EIO, ENOMEM},
        Result,
    },
};

use super::{device::Device, mr::DoneFn};
use crate::{
    kapi::{
        cell::LeaseCell,
        page::{self, in_page, Outbound, PageRef},
    },
    sys,
};

/// Most SGEs one Send carries: the copied transport header and RPC head,
/// DMA-mapped pieces of the page list, the copied tail.
pub(crate) const MAX_SEND_SGES: usize = 8;

/// A buffer DMA-mapped once for its whole life, and the work request that
/// carries it (a Send or a Receive).
///
/// # Invariants
///
/// While `state.data` is not empty, its heap storage is mapped at `dma` on
/// `device` (to the device for a Send, from it for a Receive), and the
/// device outlives this value (the contract of `new`). The first
/// `state.pages.n` entries of `state.pages` are pages mapped on `device`,
/// each holding a page reference of its own. `virt_dma` is `device`'s
/// [`Device::uses_virt_dma`]. `posted_seq` is written only under the
/// connection's Send lock.
pub(crate) struct DmaBuf {
    /// Written once; ib_core reads it when the work request completes.
    pub(super) cqe: sys::ib_cqe,
    pub(super) dma: u64,
    pub(super) index: usize,
    device: *mut sys::ib_device,
    /// The device's DMA is done in software: no syncing.
    virt_dma: bool,
    send: bool,
    /// A Send buffer: the number of the Send last posted in it (0: none
    /// yet), see the connection's Send queue.
    pub(super) posted_seq: AtomicU64,
    /// A Send buffer: the connection's count of Send chain work requests
    /// once its last Send was posted (written under the Send lock).
    pub(super) wrs_end: AtomicU64,
    /// A Send buffer: its last Send mapped pages that are not unmapped yet
    /// (written under the Send lock).
    pub(super) mapped: AtomicBool,
    /// A Send buffer: the R/W operation chained in front of its last Send
    /// that the Send's completion destroys (`NO_RW`: none), see
    /// [`Conn::send_after_writes`](super::Conn::send_after_writes).
    /// Written under the Send lock.
    pub(super) carried_rw: AtomicU16,
    /// What the buffer's holder writes: a sender between taking the buffer
    /// and posting it, the device while it is posted, the completion that
    /// takes it back.
    pub(super) cell: LeaseCell<BufState>,
}

// SAFETY: `device` is only passed to ib_core's DMA calls, which are
// thread-safe; the rest is plain data written once, atomics, or behind the
// lease cell.
unsafe impl Send for DmaBuf {}
// SAFETY: see `Send`.
unsafe impl Sync for DmaBuf {}

/// The contents of a [`DmaBuf`] that change hands.
///
/// # Invariants
///
/// The work requests' `sg_list` is this state's `sge`, their `wr_cqe` the
/// holding `DmaBuf`'s `cqe` (both in the same pinned allocation), and their
/// `next` is null or a request of a chain being posted.
pub(super) struct BufState {
    pub(super) data: KVec<u8>,
    /// A Receive uses the first entry only.
    pub(super) sge: [sys::ib_sge; MAX_SEND_SGES],
    pub(super) send_wr: sys::ib_send_wr,
    pub(super) recv_wr: sys::ib_recv_wr,
    /// Pages mapped for the Send in this buffer.
    pub(super) pages: MappedPages,
}

// SAFETY: the work requests' pointers name the buffer's own SGEs and CQE (in
// the same pinned `DmaBuf`) or the next request of a chain being posted, and
// the mapped pages are held by references of their own; giving the state to
// another thread moves none of what they point at (type invariant).
unsafe impl Send for BufState {}

/// DMA mappings of pages a Send carries, each with the page reference the
/// mapping took.
pub(super) struct MappedPages {
    page: [*mut sys::page; MAX_SEND_SGES],
    dma: [u64; MAX_SEND_SGES],
    len: [u32; MAX_SEND_SGES],
    pub(super) n: usize,
}

impl MappedPages {
    const NONE: Self =
        MappedPages { page: [ptr::null_mut(); MAX_SEND_SGES], dma: [0; MAX_SEND_SGES], len: [0; MAX_SEND_SGES], n: 0 };

    /// Unmaps every page and drops its reference, once; true if there were
    /// any. Most Sends map none: only the test is inlined.
    ///
    /// # Safety
    ///
    /// The pages were mapped on `device`, and the HCA is done with them.
    #[inline(always)]
    unsafe fn unmap(&mut self, device: *mut sys::ib_device) -> bool {
        if self.n == 0 {
            return false;
        }
        // SAFETY: per the function's contract.
        unsafe { self.unmap_all(device) };
        true
    }

    /// See [`MappedPages::unmap`].
    ///
    /// # Safety
    ///
    /// As for [`MappedPages::unmap`].
    #[inline(never)]
    unsafe fn unmap_all(&mut self, device: *mut sys::ib_device) {
        let n = core::mem::replace(&mut self.n, 0);
        for ((&page, &dma), &len) in self.page.iter().zip(self.dma.iter()).zip(self.len.iter()).take(n) {
            // SAFETY: per the function's contract; each entry holds the
            // reference its mapping took, given up once here (`n` is 0
            // from now on).
            unsafe {
                sys::rpcrdma_rs_dma_unmap_page(device, dma, len as usize);
                page::put(page);
            }
        }
    }
}

impl DmaBuf {
    /// Maps `data` on `device` and builds its work request: a Send
    /// (`send`) or a Receive, whose completion calls `done`.
    ///
    /// # Safety
    ///
    /// The device must outlive the buffer, and `done` must accept
    /// completions of a `DmaBuf`'s CQE.
    pub(super) unsafe fn new(
        device: &Device,
        lkey: u32,
        mut data: KVec<u8>,
        index: usize,
        send: bool,
        done: DoneFn,
    ) -> Result<Pin<KBox<DmaBuf>>> {
        let size = data.len();
        let dev = device.as_ptr();
        // SAFETY: the device is live; `data` is a kmalloc'ed buffer that
        // stays put (a KVec's heap storage never moves unless it grows, and
        // it never grows) until `Drop` or `into_data` unmaps it.
        let dma = unsafe {
            if send {
                sys::rpcrdma_rs_dma_map_to_device(dev, data.as_mut_ptr().cast(), size)
            } else {
                sys::rpcrdma_rs_dma_map_from_device(dev, data.as_mut_ptr().cast(), size)
            }
        };
        // SAFETY: the device is live.
        if unsafe { sys::rpcrdma_rs_dma_mapping_error(dev, dma) } != 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: `data` is mapped at `dma` on the device in the
        // buffer's direction; no pages yet. If the allocation fails, the
        // value (and with it the mapping) is dropped, which unmaps.
        let buf = KBox::pin(
            DmaBuf {
                cqe: sys::ib_cqe { done: Some(done) },
                dma,
                index,
                device: dev,
                virt_dma: device.uses_virt_dma(),
                send,
                posted_seq: AtomicU64::new(0),
                wrs_end: AtomicU64::new(0),
                mapped: AtomicBool::new(false),
                carried_rw: AtomicU16::new(super::token::NO_RW),
                cell: LeaseCell::new(BufState {
                    data,
                    sge: [sys::ib_sge { addr: dma, length: size as u32, lkey }; MAX_SEND_SGES],
                    send_wr: Default::default(),
                    recv_wr: Default::default(),
                    pages: MappedPages::NONE,
                }),
            },
            GFP_KERNEL,
        )?;
        // The box is pinned, so the CQE and SGE addresses are stable for
        // the WRs that point at them; ib_core only reads the CQE.
        let mut b = buf.cell.lease().ok_or(EINVAL)?;
        let cqe = ptr::from_ref(&buf.cqe).cast_mut();
        let sges = b.sge.as_mut_ptr();
        if send {
            let wr = &mut b.send_wr;
            wr.__bindgen_anon_1.wr_cqe = cqe;
            wr.sg_list = sges;
            wr.num_sge = 1;
            wr.opcode = sys::ib_wr_opcode_IB_WR_SEND;
            wr.send_flags = sys::ib_send_flags_IB_SEND_SIGNALED;
        } else {
            let wr = &mut b.recv_wr;
            wr.__bindgen_anon_1.wr_cqe = cqe;
            wr.sg_list = sges;
            wr.num_sge = 1;
        }
        drop(b);
        Ok(buf)
    }

    /// Unmaps the pages a Send carried and drops their references; true if
    /// there were any. The caller holds the state, and the HCA is done
    /// with the pages (their Send completed, or was never posted).
    #[inline]
    pub(super) fn unmap_pages(&self, pages: &mut MappedPages) -> bool {
        // SAFETY: mapped on `device` by `SendWriter::map_page` (type
        // invariant); the HCA is done with them (above).
        unsafe { pages.unmap(self.device) }
    }

    /// [`DmaBuf::unmap_pages`] for a Send that was not posted after all:
    /// out of line, so that the usual post keeps its registers.
    #[cold]
    #[inline(never)]
    pub(super) fn unmap_unposted(&self, pages: &mut MappedPages) {
        self.unmap_pages(pages);
    }

    /// Makes the first `len` bytes written by the CPU visible to the device.
    #[inline]
    pub(super) fn sync_for_device(&self, len: usize) {
        // Tested here, as `ib_dma_sync_single_for_device` does, rather than
        // in a call.
        if self.virt_dma {
            return;
        }
        // SAFETY: the buffer is mapped on `device` (type invariant); syncing
        // a prefix of it is always allowed.
        unsafe { sys::rpcrdma_rs_dma_sync_for_device(self.device, self.dma, len) };
    }

    /// Makes the first `len` bytes written by the device visible to the CPU.
    #[inline]
    pub(super) fn sync_for_cpu(&self, len: usize) {
        if self.virt_dma {
            return;
        }
        // SAFETY: as in `sync_for_device`.
        unsafe { sys::rpcrdma_rs_dma_sync_for_cpu(self.device, self.dma, len) };
    }

    /// Unmaps the buffer and gives its memory back (teardown: the device
    /// is done with every buffer).
    pub(super) fn into_data(self: Pin<KBox<Self>>) -> KVec<u8> {
        Pin::into_inner(self).unmap_all()
    }

    /// Unmaps everything the buffer has mapped, once, and takes its memory
    /// out (empty if it was taken before).
    fn unmap_all(&mut self) -> KVec<u8> {
        let (device, dma, send) = (self.device, self.dma, self.send);
        let st = self.cell.get_mut();
        // SAFETY: mapped on `device` (type invariant); only the owner's
        // teardown, after the device let go of everything, gets here.
        unsafe { st.pages.unmap(device) };
        let len = st.data.len();
        if len == 0 {
            return KVec::new();
        }
        // SAFETY: mapped at `dma` on `device` in this direction (type
        // invariant), unmapped once: the data is taken or dropped next.
        unsafe {
            if send {
                sys::rpcrdma_rs_dma_unmap_to_device(device, dma, len);
            } else {
                sys::rpcrdma_rs_dma_unmap_from_device(device, dma, len);
            }
        }
        // INVARIANT: the mapping is gone, and the data with it.
        core::mem::take(&mut st.data)
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        drop(self.unmap_all());
    }
}

/// A [`SendWriter`] that only copies: a Send that names no memory of
/// anybody's but the connection's own buffer.
pub(crate) enum Copying {}

/// A [`SendWriter`] that may also map pages of its Send's lender in place
/// ([`SendWriter::map_page`]).
pub(crate) enum Mapping {}

/// Builds the SGE list of one Send: bytes copied into the pre-mapped buffer
/// and, for a `SendWriter<Mapping>`, pages of the Send's lender mapped in
/// place, in message order.
pub(crate) struct SendWriter<'a, M> {
    pub(super) data: &'a mut [u8],
    pub(super) used: usize,
    pub(super) sges: &'a mut [sys::ib_sge; MAX_SEND_SGES],
    pub(super) n: usize,
    pub(super) max_sge: usize,
    /// The last SGE points into the pre-mapped buffer and ends at `used`.
    pub(super) last_copied: bool,
    pub(super) pages: &'a mut MappedPages,
    /// The lender whose pages may be mapped ([`Mapping`] only).
    pub(super) owner: u64,
    pub(super) device: &'a Device,
    pub(super) dma: u64,
    pub(super) lkey: u32,
    pub(super) _mode: PhantomData<M>,
}

/// What builds a Send's message in a [`SendWriter`]: any closure that
/// does, or a value whose [`Fill::fill`] is `#[inline(always)]`. A
/// closure's call is inlined into the post only when the optimiser finds
/// it cheap, which at `opt-level=s` (kernels built for size) a whole
/// message's fill never is; a value's `fill` then still is.
pub(crate) trait Fill<M> {
    /// Writes the message into `out`.
    fn fill(self, out: &mut SendWriter<'_, M>) -> Result;
}

impl<M, F: FnOnce(&mut SendWriter<'_, M>) -> Result> Fill<M> for F {
    #[inline(always)]
    fn fill(self, out: &mut SendWriter<'_, M>) -> Result {
        self(out)
    }
}

impl<M> SendWriter<'_, M> {
    /// Appends bytes copied into the pre-mapped buffer: `f` gets the room
    /// left and returns how much of it it filled.
    #[inline(always)]
    pub(crate) fn copy(&mut self, f: impl FnOnce(&mut [u8]) -> Result<usize>) -> Result {
        let len = f(self.room())?;
        self.copied(len)
    }

    /// The room left in the pre-mapped buffer: bytes written at its start
    /// are appended by [`SendWriter::copied`]. With `copied`, what
    /// [`SendWriter::copy`] does without a closure, whose call at
    /// `opt-level=s` is not inlined when it is large.
    #[inline(always)]
    pub(crate) fn room(&mut self) -> &mut [u8] {
        self.data.get_mut(self.used..).unwrap_or_default()
    }

    /// Appends the first `len` bytes of the [room](SendWriter::room).
    #[inline(always)]
    pub(crate) fn copied(&mut self, len: usize) -> Result {
        if len > self.data.len().saturating_sub(self.used) {
            return Err(EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        // None of these wraps: `used + len` is at most the buffer's length
        // (a `u32`, the Send's size), and the buffer is mapped whole at
        // `dma`.
        let addr = self.dma.wrapping_add(self.used as u64);
        self.used = self.used.wrapping_add(len);
        if self.last_copied {
            if let Some(prev) = self.n.checked_sub(1).and_then(|i| self.sges.get_mut(i)) {
                prev.length = prev.length.wrapping_add(len as u32);
                return Ok(());
            }
        }
        self.push(sys::ib_sge { addr, length: len as u32, lkey: self.lkey })?;
        self.last_copied = true;
        Ok(())
    }

    #[inline(always)]
    fn push(&mut self, sge: sys::ib_sge) -> Result {
        if self.n >= self.max_sge {
            return Err(EINVAL);
        }
        *self.sges.get_mut(self.n).ok_or(EINVAL)? = sge;
        // Below `MAX_SEND_SGES`: the entry exists.
        self.n = self.n.wrapping_add(1);
        Ok(())
    }
}

impl SendWriter<'_, Mapping> {
    /// Appends `len` bytes at `offset` in `page`, a page of the Send's
    /// lender, DMA-mapped where they are. The mapping takes a reference
    /// of the page, dropped when it is unmapped; the [`InFlight`] the Send
    /// returns says when the device is done reading it.
    ///
    /// [`InFlight`]: super::InFlight
    pub(crate) fn map_page(&mut self, page: PageRef<'_, Outbound>, offset: u32, len: u32) -> Result {
        if len == 0 {
            return Ok(());
        }
        if !in_page(offset, len) || page.owner() != self.owner {
            return Err(EINVAL);
        }
        let i = self.pages.n;
        if self.n >= self.max_sge || i >= MAX_SEND_SGES {
            return Err(EINVAL);
        }
        let p = page.get().ok_or(EINVAL)?;
        let device = self.device.as_ptr();
        // SAFETY: the device is live (borrowed); the page is live (the
        // reference just taken) and the bytes are inside it.
        let dma = unsafe { sys::rpcrdma_rs_dma_map_page(device, p, offset as kernel::ffi::c_ulong, len as usize) };
        // SAFETY: as above.
        if unsafe { sys::rpcrdma_rs_dma_mapping_error(device, dma) } != 0 {
            // SAFETY: taken just above, never mapped.
            unsafe { page::put(p) };
            return Err(EIO);
        }
        // `i` is below `MAX_SEND_SGES`, checked above: no index fails, no
        // count wraps. INVARIANT: a page mapped on the device, with its
        // reference.
        self.pages.page[i] = p;
        self.pages.dma[i] = dma;
        self.pages.len[i] = len;
        self.pages.n = i.wrapping_add(1);
        self.push(sys::ib_sge { addr: dma, length: len, lkey: self.lkey })?;
        self.last_copied = false;
        Ok(())
    }
}
