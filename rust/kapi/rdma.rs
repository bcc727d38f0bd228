// SPDX-License-Identifier: GPL-2.0

//! One RDMA connection: an rdma_cm identifier with its protection domain,
//! completion queues, RC queue pair and the Send and Receive buffers posted on
//! it.
//!
//! [`Connection`] owns every one of these objects and releases them in the
//! only safe order in `Drop`: the queue pair is drained (every posted work
//! request completes, flushed), then destroyed, then the CQs (which waits for
//! running completion handlers), the buffers, the PD and finally the cm_id
//! (which waits for a running CM event handler). The hardware only ever
//! borrows buffers the connection owns, so no buffer can be freed while the
//! HCA may still touch it.
//!
//! Users see none of this: they implement [`ConnHandler`] and get CM events
//! and received bytes by reference; sending is a closure that fills a
//! pre-mapped buffer.

use core::{
    mem::offset_of,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{from_err_ptr, to_result, Error, Result},
    ffi::{c_int, c_void},
    new_condvar, new_spinlock,
    prelude::*,
    new_mutex,
    sync::{Arc, CondVar, Mutex, SpinLock},
};

use super::cell::{Lease, LeaseCell};
use super::errno;
use super::net::{Net, SockAddr};
use super::page::{in_page, PageRef};
use crate::{proto::credits::SendQueue, sys};

/// An rdma_cm event, as the connection's handler sees it.
#[derive(Debug)]
pub(crate) enum CmEvent<'a> {
    /// Address resolution finished.
    AddrResolved,
    /// Address resolution failed (status).
    AddrError(i32),
    /// Route resolution finished.
    RouteResolved,
    /// Route resolution failed (status).
    RouteError(i32),
    /// The connection is up; the peer's private data.
    Established(&'a [u8]),
    /// The peer rejected the connection (status, private data).
    Rejected(i32, &'a [u8]),
    /// The peer cannot be reached (status).
    Unreachable(i32),
    /// Connection establishment failed (status).
    ConnectError(i32),
    /// The connection is gone.
    Disconnected,
    /// The RDMA device is being removed.
    DeviceRemoval,
    /// The local address changed.
    AddrChange,
    /// Any other event.
    Other,
}

/// How a work request completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// Success.
    Ok,
    /// Flushed: the queue pair went to the error state (disconnect or drain).
    Flushed,
    /// Failed with this `ib_wc_status`.
    Failed(u32),
}

impl Completion {
    fn of(wc: &sys::ib_wc) -> Self {
        match wc.status {
            sys::ib_wc_status_IB_WC_SUCCESS => Completion::Ok,
            sys::ib_wc_status_IB_WC_WR_FLUSH_ERR => Completion::Flushed,
            s => Completion::Failed(s),
        }
    }
}

/// What arrived in a Receive.
pub(crate) struct Received<'a> {
    /// The bytes the peer sent.
    pub(crate) data: &'a [u8],
    /// The rkey the peer invalidated with Send With Invalidate, if it did.
    pub(crate) invalidated_rkey: Option<u32>,
}

/// The transport logic riding on a [`Connection`].
pub(crate) trait ConnHandler: Send + Sync + Sized {
    /// An rdma_cm event arrived. Runs in the CM's work context; must not
    /// destroy the connection.
    fn cm_event(&self, event: CmEvent<'_>);

    /// A Receive completed successfully. The buffer is reposted when this
    /// returns: copy out what must be kept. Runs in process context and may
    /// sleep (to invalidate memory regions through `conn`).
    fn received(&self, conn: Live<'_, Self>, msg: Received<'_>);

    /// A Receive failed (not flushed): the connection must be dropped.
    fn receive_failed(&self, status: u32);

    /// A LOCAL_INV could not be posted. The queue pair is already in the
    /// error state (the regions' rkeys reach nothing any more); the
    /// connection must be dropped.
    fn invalidate_failed(&self);

    /// A Send completed; its buffer is free again.
    fn send_done(&self, how: Completion);

    /// A liveness probe ([`Connection::probe`]) completed: `Ok` if the
    /// peer's queue pair acknowledged it, `Failed` if the device gave up
    /// reaching it (the connection is dead), `Flushed` if the queue pair
    /// went down meanwhile.
    fn probe_done(&self, how: Completion);

    /// Where this connection's Sends, Receive buffers and probes are
    /// counted.
    fn counters(&self) -> &'static VerbsCounters;

    /// A test hook: true if the next LOCAL_INV post is to fail as if the
    /// device had refused it. Never, unless the handler says so.
    fn inject_local_inv_failure(&self) -> bool {
        false
    }
}

/// What a device can do, read after address resolution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceCaps {
    /// Largest number of work requests in one queue.
    pub(crate) max_qp_wr: u32,
    /// Largest number of SGEs in a Send.
    pub(crate) max_send_sge: u32,
    /// Largest number of RDMA Reads the device accepts in flight per QP.
    pub(crate) max_qp_rd_atom: u32,
    /// The device supports fast registration (FRWR).
    pub(crate) frwr: bool,
    /// Most pages one fast registration may cover.
    pub(crate) max_fast_reg_pages: u32,
}

/// Queue pair and buffer sizing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpConfig {
    /// Send buffers (= Sends that may be outstanding).
    pub(crate) send_bufs: usize,
    /// Bytes in each Send buffer.
    pub(crate) send_buf_size: usize,
    /// SGEs a Send may carry (at most [`MAX_SEND_SGES`]).
    pub(crate) send_sges: usize,
    /// A Send is signalled at least once every this many Sends; the ones
    /// in between are reclaimed by the next signalled completion.
    pub(crate) signal_interval: u32,
    /// Receive buffers (all posted all the time).
    pub(crate) recv_bufs: usize,
    /// Bytes in each Receive buffer.
    pub(crate) recv_buf_size: usize,
    /// Completed Receives are reposted together, in one chained post, once
    /// this many have gathered; `recv_bufs` must include that many spares.
    pub(crate) recv_batch: usize,
    /// Memory regions for chunks.
    pub(crate) mrs: usize,
    /// Pages each memory region can cover.
    pub(crate) mr_pages: u32,
    /// Send Queue work requests: Sends plus registrations and invalidations.
    pub(crate) send_wrs: usize,
}

/// Most memory regions one RPC may register.
pub(crate) const MAX_MRS: usize = 8;

/// What the connections and Receive caches count. The owner of the one
/// instance (the client, a `static`) decides where it is shown.
#[derive(Debug)]
pub(crate) struct VerbsCounters {
    /// Sends posted.
    pub(crate) sends: AtomicU64,
    /// Sends posted with a completion requested.
    pub(crate) sends_signalled: AtomicU64,
    /// Sends that carried DMA-mapped pages.
    pub(crate) sends_mapped: AtomicU64,
    /// Liveness probes posted ([`Connection::probe`]).
    pub(crate) probes: AtomicU64,
    /// Receive buffers allocated ([`RecvCache`]): it stays put across
    /// reconnects, which reuse a transport's buffers.
    pub(crate) recv_bufs_allocated: AtomicU64,
}

impl VerbsCounters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        VerbsCounters {
            sends: AtomicU64::new(0),
            sends_signalled: AtomicU64::new(0),
            sends_mapped: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            recv_bufs_allocated: AtomicU64::new(0),
        }
    }
}

/// Most SGEs one Send carries: the copied transport header and RPC head,
/// DMA-mapped pieces of the page list, the copied tail.
pub(crate) const MAX_SEND_SGES: usize = 8;

/// Pages of an RPC that a posted Send may still be reading (DMA-mapped into
/// it rather than copied). Returned by [`Connection::send`]; the RPC holds it
/// and must not give its pages back before [`Live::wait_sent`] (or
/// [`Connection::wait_sent`]) has consumed it, which yields the
/// [`SendDone`] proof. A token of a connection that is gone holds nothing:
/// tearing a connection down completes every Send.
#[must_use = "the HCA may still read these pages: wait for the Send"]
pub(crate) struct PagesInFlight {
    generation: u64,
    index: usize,
    seq: u64,
}

impl PagesInFlight {
    /// A token for a Send that mapped nothing.
    pub(crate) const fn none() -> Self {
        PagesInFlight { generation: 0, index: usize::MAX, seq: 0 }
    }

    /// True for a token that holds nothing to wait for.
    pub(crate) fn is_none(&self) -> bool {
        self.index == usize::MAX
    }
}

/// Memory regions an RPC registered on one connection whose REG_MR work
/// requests are not posted yet. [`Connection::register`] adds to it; the
/// Send that advertises the regions consumes it ([`Connection::send`]) and
/// returns the [`PostedRegistration`]; a call that is not sent gives the
/// regions back with [`Connection::release_unposted`]. Posting needs the
/// token by value, so its REG_MRs are posted once.
#[must_use = "an unposted registration holds mapped memory regions: send or release it"]
pub(crate) struct Registration(Regions);

/// The memory regions a registration token holds, and the generation of the
/// connection they belong to (meaningful only while `n > 0`).
struct Regions {
    generation: u64,
    mrs: [u16; MAX_MRS],
    n: usize,
}

impl Regions {
    const NONE: Regions = Regions { generation: 0, mrs: [0; MAX_MRS], n: 0 };

    /// The regions held, in registration order.
    fn held(&self) -> &[u16] {
        self.mrs.get(..self.n).unwrap_or(&[])
    }
}

impl Registration {
    /// A token that holds nothing.
    pub(crate) const fn empty() -> Self {
        Registration(Regions::NONE)
    }

    /// Moves the regions out, leaving this token empty.
    #[inline]
    pub(crate) fn take(&mut self) -> Registration {
        let n = core::mem::replace(&mut self.0.n, 0);
        Registration(Regions { generation: self.0.generation, mrs: self.0.mrs, n })
    }
}

/// Memory regions an RPC registered and advertised: the peer may read or
/// write them until [`Connection::invalidate`] consumes the token and
/// returns the [`Invalidated`] proof. A token whose connection is gone
/// holds nothing (the connection released every region when it was torn
/// down, its queue pair first).
#[must_use = "the peer can reach these regions until they are invalidated"]
pub(crate) struct PostedRegistration(Regions);

impl PostedRegistration {
    /// A token that holds nothing.
    pub(crate) const fn none() -> Self {
        PostedRegistration(Regions::NONE)
    }

    /// True if it holds no memory region.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.n == 0
    }

    /// Memory regions held.
    pub(crate) fn len(&self) -> usize {
        self.0.n
    }
}

/// Proof that the peer can no longer reach an RPC's memory regions: they
/// were invalidated (or never posted, or their queue pair is in the error
/// state). Made only by [`Connection::invalidate`] and
/// [`Connection::release_unposted`].
pub(crate) struct Invalidated(());

/// Proof that no Send reads an RPC's pages any more. Made only by
/// [`Connection::wait_sent`] and [`Live::wait_sent`].
pub(crate) struct SendDone(());

/// A Send that failed: the error and the registration it did not post.
pub(crate) struct SendFailed {
    /// Why.
    pub(crate) err: Error,
    /// The regions, still unposted: give them back.
    pub(crate) reg: Registration,
}

/// Fills the scatterlist of a memory region being registered.
pub(crate) struct SgWriter<'a> {
    sg: &'a mut [sys::scatterlist],
    n: usize,
}

impl SgWriter<'_> {
    /// Appends `len` bytes at `offset` in `page` (inside the page).
    pub(crate) fn push(&mut self, page: PageRef<'_>, len: u32, offset: u32) -> Result {
        if !in_page(offset, len) {
            return Err(EINVAL);
        }
        let sg = self.sg.get_mut(self.n).ok_or(EINVAL)?;
        // SAFETY: `sg` is an initialised entry of this region's table; the
        // page is a live page (`PageRef`) of the RPC's buffer, which the RPC
        // keeps until its regions are invalidated; the bytes are inside it.
        unsafe { sys::rpcrdma_rs_sg_set_page(sg, page.as_ptr(), len, offset) };
        self.n += 1;
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

/// A pre-mapped buffer and the work request that carries it.
struct Buf {
    /// Written once; ib_core reads it when the work request completes.
    cqe: sys::ib_cqe,
    dma: u64,
    index: usize,
    /// What the buffer's holder writes: a sender between taking the buffer
    /// off the free list and posting it, the device while it is posted,
    /// the completion that takes it back.
    cell: LeaseCell<BufState>,
}

/// The contents of a [`Buf`] that change hands.
struct BufState {
    data: KVec<u8>,
    /// A Receive uses the first entry only.
    sge: [sys::ib_sge; MAX_SEND_SGES],
    send_wr: sys::ib_send_wr,
    recv_wr: sys::ib_recv_wr,
    /// Pages mapped for the Send in this buffer.
    pages: MappedPages,
}

// SAFETY: the work requests' pointers name the buffer's own SGEs and CQE (in
// the same pinned `Buf`) or the next request of a chain being posted; giving
// the state to another thread moves none of what they point at.
unsafe impl Send for BufState {}

/// DMA mappings of pages a Send carries.
struct MappedPages {
    dma: [u64; MAX_SEND_SGES],
    len: [u32; MAX_SEND_SGES],
    n: usize,
}

impl MappedPages {
    /// Unmaps every page from `device`; returns how many there were.
    ///
    /// # Safety
    ///
    /// The pages were mapped on `device` by [`SendWriter::map_page`] and
    /// the HCA is done with them (their Send completed or was never
    /// posted).
    #[inline]
    unsafe fn unmap(&mut self, device: *mut sys::ib_device) -> usize {
        let n = core::mem::replace(&mut self.n, 0);
        for (&dma, &len) in self.dma.iter().zip(self.len.iter()).take(n) {
            // SAFETY: per the function's contract.
            unsafe { sys::rpcrdma_rs_dma_unmap_page(device, dma, len as usize) };
        }
        n
    }
}

/// Builds the SGE list of one Send: bytes copied into the pre-mapped buffer
/// and pages mapped in place, in message order.
pub(crate) struct SendWriter<'a> {
    data: &'a mut [u8],
    used: usize,
    sges: &'a mut [sys::ib_sge; MAX_SEND_SGES],
    n: usize,
    max_sge: usize,
    /// The last SGE points into the pre-mapped buffer and ends at `used`.
    last_copied: bool,
    pages: &'a mut MappedPages,
    device: *mut sys::ib_device,
    dma: u64,
    lkey: u32,
}

impl SendWriter<'_> {
    /// Appends bytes copied into the pre-mapped buffer: `f` gets the room
    /// left and returns how much of it it filled.
    pub(crate) fn copy(&mut self, f: impl FnOnce(&mut [u8]) -> Result<usize>) -> Result {
        let room = self.data.get_mut(self.used..).ok_or(EINVAL)?;
        let cap = room.len();
        let len = f(room)?;
        if len > cap {
            return Err(EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let addr = self.dma + self.used as u64;
        self.used += len;
        if self.last_copied {
            if let Some(prev) = self.n.checked_sub(1).and_then(|i| self.sges.get_mut(i)) {
                prev.length += len as u32;
                return Ok(());
            }
        }
        self.push(sys::ib_sge { addr, length: len as u32, lkey: self.lkey })?;
        self.last_copied = true;
        Ok(())
    }

    /// Appends `len` bytes at `offset` in `page`, DMA-mapped where they
    /// are: the page must stay until the Send is done with it, which the
    /// [`PagesInFlight`] token returned by the send tracks.
    pub(crate) fn map_page(&mut self, page: PageRef<'_>, offset: u32, len: u32) -> Result {
        if len == 0 {
            return Ok(());
        }
        if !in_page(offset, len) {
            return Err(EINVAL);
        }
        if self.n >= self.max_sge || self.pages.n >= MAX_SEND_SGES {
            return Err(EINVAL);
        }
        // SAFETY: the device is valid while the connection exists; the page
        // is live (`PageRef`: a page of the RPC's send buffer, which the RPC
        // keeps until its `PagesInFlight` is waited for) and the bytes are
        // inside it.
        let dma = unsafe {
            sys::rpcrdma_rs_dma_map_page(self.device, page.as_ptr(), offset as kernel::ffi::c_ulong, len as usize)
        };
        // SAFETY: as above.
        if unsafe { sys::rpcrdma_rs_dma_mapping_error(self.device, dma) } != 0 {
            return Err(EIO);
        }
        let i = self.pages.n;
        self.pages.dma[i] = dma;
        self.pages.len[i] = len;
        self.pages.n += 1;
        self.push(sys::ib_sge { addr: dma, length: len, lkey: self.lkey })?;
        self.last_copied = false;
        Ok(())
    }

    fn push(&mut self, sge: sys::ib_sge) -> Result {
        if self.n >= self.max_sge {
            return Err(EINVAL);
        }
        *self.sges.get_mut(self.n).ok_or(EINVAL)? = sge;
        self.n += 1;
        Ok(())
    }
}

/// Who holds each Send buffer: the free list, a sender filling it, or the
/// ring of posted Sends (in posting order) waiting for a signalled
/// completion at or after them.
struct SendState {
    free: FreeList,
    ring: KVec<usize>,
    head: usize,
    len: usize,
    posted: KVec<bool>,
    /// Bumped each time a buffer is posted, so that a [`PagesInFlight`]
    /// cannot mistake a later Send in the same buffer for its own.
    seq: KVec<u64>,
    sq: SendQueue,
}

impl SendState {
    fn empty() -> Self {
        SendState {
            free: FreeList { slots: KVec::new(), top: 0 },
            ring: KVec::new(),
            head: 0,
            len: 0,
            posted: KVec::new(),
            seq: KVec::new(),
            sq: SendQueue::new(0, 0, 1),
        }
    }

    fn new(n: usize, signal_interval: u32) -> Result<Self> {
        Ok(SendState {
            free: FreeList::full(n)?,
            ring: KVec::from_elem(0usize, n, GFP_KERNEL)?,
            head: 0,
            len: 0,
            posted: KVec::from_elem(false, n, GFP_KERNEL)?,
            seq: KVec::from_elem(0u64, n, GFP_KERNEL)?,
            sq: SendQueue::new(u32::try_from(n).map_err(|_| EINVAL)?, 0, signal_interval),
        })
    }

    /// Records a posted Send; returns its sequence number.
    #[inline]
    fn push_posted(&mut self, index: usize) -> u64 {
        let cap = self.ring.len();
        if cap == 0 || self.len >= cap {
            return 0;
        }
        let at = (self.head + self.len) % cap;
        if let Some(slot) = self.ring.get_mut(at) {
            *slot = index;
        }
        self.len += 1;
        if let Some(p) = self.posted.get_mut(index) {
            *p = true;
        }
        match self.seq.get_mut(index) {
            Some(seq) => {
                *seq = seq.wrapping_add(1);
                *seq
            }
            None => 0,
        }
    }

    /// Takes the oldest posted Send off the ring.
    fn pop_posted(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let index = *self.ring.get(self.head)?;
        self.head = (self.head + 1) % self.ring.len();
        self.len -= 1;
        if let Some(p) = self.posted.get_mut(index) {
            *p = false;
        }
        Some(index)
    }

    fn is_posted(&self, index: usize) -> bool {
        self.posted.get(index).copied().unwrap_or(false)
    }
}

/// A fast-registration memory region and its work requests.
struct Mr {
    /// Written once; ib_core reads them when the work requests complete.
    reg_cqe: sys::ib_cqe,
    inv_cqe: sys::ib_cqe,
    /// Set by the LOCAL_INV completion.
    inv_done: AtomicBool,
    inv_ok: AtomicBool,
    index: u16,
    /// Held by the free list, by `register` while it maps the region, then
    /// (handed off) by the [`Registration`] that owns the region until
    /// `invalidate` or `release_unposted` takes it back.
    cell: LeaseCell<MrState>,
}

/// The contents of an [`Mr`] that change hands. None of it is read by the
/// device: work requests are copied when posted, and `ib_map_mr_sg` copies
/// the scatterlist's DMA addresses into the region.
struct MrState {
    ibmr: *mut sys::ib_mr,
    sg: KVec<sys::scatterlist>,
    /// Scatterlist entries DMA-mapped (0: not mapped).
    mapped: u32,
    to_device: bool,
    reg_wr: sys::ib_reg_wr,
    inv_wr: sys::ib_send_wr,
}

impl MrState {
    /// Unmaps the scatterlist entries mapped for the last registration.
    ///
    /// # Safety
    ///
    /// They were mapped on `device` by [`Connection::register`] and the HCA
    /// is done with them.
    #[inline]
    unsafe fn unmap(&mut self, device: *mut sys::ib_device) {
        let n = core::mem::replace(&mut self.mapped, 0);
        if n != 0 {
            // SAFETY: per the function's contract, for `n` entries mapped in
            // this direction.
            unsafe { sys::rpcrdma_rs_dma_unmap_sg(device, self.sg.as_mut_ptr(), n as i32, self.to_device) };
        }
    }
}

// SAFETY: `ibmr` is an ib_core region only this state's holder uses; the work
// requests point at the region's own CQEs (in the same pinned `Mr`) or at
// requests of a chain being posted. Giving the state to another thread moves
// none of these.
unsafe impl Send for MrState {}

/// A transport's Receive buffers while no connection has them mapped.
///
/// Receive buffers are allocated once per transport, not per connection:
/// a connection takes them at creation, DMA-maps them on its device, and
/// gives them back unmapped when it is torn down, so a reconnect allocates
/// nothing. A buffer smaller than the new connection needs (the inline
/// size grew) is replaced.
#[pin_data]
pub(crate) struct RecvCache {
    #[pin]
    bufs: Mutex<Cached>,
    /// Counts the buffers allocated.
    counters: &'static VerbsCounters,
}

/// Entries `0..n` of `bufs` hold buffers; the rest are empty.
struct Cached {
    bufs: KVec<KVec<u8>>,
    n: usize,
}

impl RecvCache {
    /// An empty cache; buffers it allocates are counted in `counters`.
    pub(crate) fn new(counters: &'static VerbsCounters) -> impl PinInit<Self> {
        pin_init!(RecvCache {
            bufs <- new_mutex!(Cached { bufs: KVec::new(), n: 0 }, "rpcrdma_rs:recv_cache"),
            counters,
        })
    }

    /// A buffer of `size` bytes: a cached one if it has that size, else a
    /// new one (the inline size changed). Sleeps.
    fn take(&self, size: usize) -> Result<KVec<u8>> {
        let cached = {
            let mut c = self.bufs.lock();
            match c.n.checked_sub(1) {
                Some(last) => {
                    c.n = last;
                    c.bufs.get_mut(last).map(core::mem::take)
                }
                None => None,
            }
        };
        match cached {
            Some(data) if data.len() == size => Ok(data),
            _ => {
                self.counters.recv_bufs_allocated.fetch_add(1, Ordering::Relaxed);
                Ok(KVec::from_elem(0u8, size, GFP_KERNEL)?)
            }
        }
    }

    /// Takes the (unmapped) buffers of `bufs` back. Sleeps.
    fn give_back(&self, bufs: &mut KVec<Pin<KBox<Buf>>>) {
        let mut c = self.bufs.lock();
        for buf in bufs.iter_mut() {
            // The HCA only knew the data's heap storage, which is unmapped
            // by now; the emptied `Buf` is freed right after.
            let data = core::mem::take(&mut buf_state(buf).data);
            if data.is_empty() {
                continue;
            }
            let n = c.n;
            if let Some(slot) = c.bufs.get_mut(n) {
                *slot = data;
            } else if c.bufs.push(data, GFP_KERNEL).is_err() {
                // The buffer is freed; the next connection allocates one.
                continue;
            }
            c.n += 1;
        }
    }
}

/// The ib_core objects of a connection, by pointer.
///
/// # Invariants
///
/// Each non-null pointer is an object the connection created, released only
/// by its `Drop`.
struct Verbs {
    device: *mut sys::ib_device,
    pd: *mut sys::ib_pd,
    send_cq: *mut sys::ib_cq,
    recv_cq: *mut sys::ib_cq,
    qp: *mut sys::ib_qp,
    lkey: u32,
}

// SAFETY: the pointers name ib_core objects (type invariant), which
// serialise what is done to them themselves (posting takes the queue's lock,
// the CQs are polled by ib_core); the Rust side only passes them to ib_core.
unsafe impl Send for Verbs {}
// SAFETY: see `Send`.
unsafe impl Sync for Verbs {}

/// An rdma_cm identifier, by pointer.
///
/// # Invariants
///
/// Null, or an id created by [`Connection::new`] and destroyed only by its
/// `Drop`.
struct CmIdPtr(*mut sys::rdma_cm_id);

// SAFETY: rdma_cm serialises operations on an id itself (its handler lock
// and state machine); the Rust side only passes the pointer to rdma_cm and
// reads fields rdma_cm set before the calls that depend on them.
unsafe impl Send for CmIdPtr {}
// SAFETY: see `Send`.
unsafe impl Sync for CmIdPtr {}

/// The liveness probe's work request; see [`Connection::probe`].
struct ProbeWr(sys::ib_rdma_wr);

// SAFETY: its one pointer names the connection's own probe CQE, in the same
// pinned allocation.
unsafe impl Send for ProbeWr {}

/// Indices of idle Send buffers: a stack with room for all of them, so that
/// push and pop never allocate.
pub(crate) struct FreeList {
    slots: KVec<usize>,
    top: usize,
}

impl FreeList {
    /// A stack holding `0..n`.
    pub(crate) fn full(n: usize) -> Result<Self> {
        let mut slots = KVec::from_elem(0usize, n, GFP_KERNEL)?;
        for (i, s) in slots.iter_mut().enumerate() {
            *s = i;
        }
        Ok(FreeList { slots, top: n })
    }

    pub(crate) fn pop(&mut self) -> Option<usize> {
        let top = self.top.checked_sub(1)?;
        let v = *self.slots.get(top)?;
        self.top = top;
        Some(v)
    }

    pub(crate) fn push(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(self.top) {
            *slot = index;
            self.top += 1;
        }
    }
}

#[pin_data]
struct Inner<T: ConnHandler> {
    handler: Arc<T>,
    /// `handler.counters()`, looked up once.
    counters: &'static VerbsCounters,
    id: CmIdPtr,
    verbs: Option<Verbs>,
    sends: KVec<Pin<KBox<Buf>>>,
    recvs: KVec<Pin<KBox<Buf>>>,
    /// Where the Receive buffers go back when the connection is torn down.
    recv_cache: Option<Arc<RecvCache>>,
    #[pin]
    send_state: SpinLock<SendState>,
    /// Woken when a Send that mapped pages is reclaimed.
    #[pin]
    send_wait: CondVar,
    send_sges: usize,
    /// Receives consumed and waiting to be reposted in one batch.
    #[pin]
    repost: SpinLock<FreeList>,
    recv_batch: usize,
    mrs: KVec<Pin<KBox<Mr>>>,
    #[pin]
    free_mrs: SpinLock<FreeList>,
    /// Woken by every LOCAL_INV completion.
    #[pin]
    inv_wait: CondVar,
    generation: u64,
    /// Set before draining: completions must not repost.
    dying: AtomicBool,
    /// Bumped whenever Send buffers or memory regions are given back; see
    /// [`Connection::release_epoch`].
    released: AtomicU64,
    /// Receives completed successfully; written only by the receive CQ's
    /// handler, which never runs twice at once.
    receives: AtomicU64,
    /// The liveness probe's work request (a zero-length RDMA Write),
    /// away while posted: there is one at a time; see
    /// [`Connection::probe`].
    probe: LeaseCell<ProbeWr>,
    /// Written once; ib_core reads it when the probe completes.
    probe_cqe: sys::ib_cqe,
}

/// Connection generations, so that a registration token can tell whether
/// the connection it was made on still exists.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// An RDMA connection and the buffers posted on it.
///
/// # Invariants
///
/// `inner.id` is an rdma_cm id created by [`Connection::new`] with `inner`
/// as its context; it is destroyed only by `Drop`, after the queue pair is
/// drained and destroyed. While `inner.verbs` is `Some`, its PD, CQs and QP
/// are live and belong to this connection.
pub(crate) struct Connection<T: ConnHandler> {
    inner: Pin<KBox<Inner<T>>>,
}

impl<T: ConnHandler> Connection<T> {
    /// Creates the rdma_cm identifier in `net` (which takes its own
    /// reference on the namespace); events go to `handler`.
    pub(crate) fn new(net: &Net, handler: Arc<T>) -> Result<Self> {
        let counters = handler.counters();
        let inner = KBox::pin_init(
            pin_init!(Inner {
                handler,
                counters,
                id: CmIdPtr(ptr::null_mut()),
                verbs: None,
                sends: KVec::new(),
                recvs: KVec::new(),
                recv_cache: None,
                send_state <- new_spinlock!(SendState::empty(), "rpcrdma_rs:send_state"),
                send_wait <- new_condvar!("rpcrdma_rs:send_wait"),
                send_sges: 1,
                repost <- new_spinlock!(FreeList { slots: KVec::new(), top: 0 }, "rpcrdma_rs:repost"),
                recv_batch: 1,
                mrs: KVec::new(),
                free_mrs <- new_spinlock!(FreeList { slots: KVec::new(), top: 0 }, "rpcrdma_rs:free_mrs"),
                inv_wait <- new_condvar!("rpcrdma_rs:inv_wait"),
                generation: GENERATION.fetch_add(1, Ordering::Relaxed),
                dying: AtomicBool::new(false),
                released: AtomicU64::new(0),
                receives: AtomicU64::new(0),
                probe: LeaseCell::new(ProbeWr(sys::ib_rdma_wr::default())),
                probe_cqe: sys::ib_cqe { done: Some(probe_done::<T>) },
            }),
            GFP_KERNEL,
        )?;
        let ctx = ptr::from_ref::<Inner<T>>(&*inner).cast_mut().cast::<c_void>();
        // SAFETY: `ctx` points to the pinned `Inner`, which outlives the id:
        // `Drop` destroys the id (waiting for running handlers) before freeing
        // it. `net` is live (borrowed), and rdma_cm holds a reference on it
        // for the id's life.
        let id = from_err_ptr(unsafe { sys::rpcrdma_rs_create_id(net.as_ptr(), Some(cm_handler::<T>), ctx) })?;
        let mut conn = Connection { inner };
        // SAFETY: only the `id` field is written; nothing is moved out of the
        // pinned allocation.
        unsafe { conn.inner.as_mut().get_unchecked_mut().id = CmIdPtr(id) };
        Ok(conn)
    }

    /// The handler given to [`Connection::new`].
    pub(crate) fn handler(&self) -> &Arc<T> {
        &self.inner.handler
    }

    /// Starts resolving `dst` to a device and address; the outcome arrives as
    /// [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    pub(crate) fn resolve_addr(&self, dst: &SockAddr, timeout_ms: u32) -> Result {
        // SAFETY: the id is valid (type invariant); `dst` is a socket address
        // (borrowed for the call), which rdma_cm copies.
        to_result(unsafe {
            sys::rdma_resolve_addr(self.inner.id.0, ptr::null_mut(), dst.as_ptr().cast_mut(), timeout_ms as kernel::ffi::c_ulong)
        })
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: the id is valid (type invariant).
        to_result(unsafe { sys::rdma_resolve_route(self.inner.id.0, timeout_ms as kernel::ffi::c_ulong) })
    }

    /// The resolved device's capabilities (after [`CmEvent::AddrResolved`]).
    // The limits are ints on 6.12 and u32s on 7.x: converting them is a
    // no-op on one line only.
    #[allow(clippy::useless_conversion)]
    pub(crate) fn device_caps(&self) -> Result<DeviceCaps> {
        // SAFETY: the id is valid; `device` is set by address resolution and
        // stays valid while the id holds it.
        let device = unsafe { (*self.inner.id.0).device };
        if device.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: `device` is valid (above); `attrs` is plain data.
        let attrs = unsafe { &(*device).attrs };
        Ok(DeviceCaps {
            max_qp_wr: u32::try_from(attrs.max_qp_wr).unwrap_or(0),
            max_send_sge: u32::try_from(attrs.max_send_sge).unwrap_or(0),
            max_qp_rd_atom: u32::try_from(attrs.max_qp_rd_atom).unwrap_or(0),
            frwr: attrs.device_cap_flags & (sys::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS as u64) != 0,
            max_fast_reg_pages: attrs.max_fast_reg_page_list_len,
        })
    }

    /// The resolved device's name, for messages.
    pub(crate) fn device_name(&self) -> Option<&kernel::str::CStr> {
        // SAFETY: as in `device_caps`.
        let device = unsafe { (*self.inner.id.0).device };
        if device.is_null() {
            return None;
        }
        // SAFETY: `device` is valid while the id holds it, and so is its name.
        Some(unsafe { super::compat::cstr_from_ptr(sys::rpcrdma_rs_ib_device_name(device)) })
    }

    /// Creates the PD, CQs, RC queue pair and buffers, and posts every
    /// Receive. Call once, after route resolution.
    pub(crate) fn create_qp(&mut self, cfg: QpConfig, cache: &Arc<RecvCache>) -> Result {
        if self.inner.verbs.is_some() || cfg.send_bufs == 0 || cfg.recv_bufs == 0 {
            return Err(EINVAL);
        }
        // SAFETY: only fields are written; nothing moves out of the pin.
        let inner = unsafe { self.inner.as_mut().get_unchecked_mut() };
        // SAFETY: the id is valid and resolved, so `device` is set.
        let device = unsafe { (*inner.id.0).device };
        if device.is_null() {
            return Err(EINVAL);
        }
        let send_wrs = u32::try_from(cfg.send_wrs.max(cfg.send_bufs)).map_err(|_| EINVAL)?;
        let recv_wrs = u32::try_from(cfg.recv_bufs).map_err(|_| EINVAL)?;
        let ctx = ptr::from_ref::<Inner<T>>(inner).cast_mut().cast::<c_void>();
        inner.recv_cache = Some(cache.clone());

        // SAFETY: `device` is valid while the id holds it.
        let pd = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_pd(device) })?;
        // From here on `inner.verbs` records what exists, so that `Drop`
        // releases exactly that, whatever step fails.
        inner.verbs = Some(Verbs {
            device,
            pd,
            send_cq: ptr::null_mut(),
            recv_cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            // SAFETY: `pd` was just allocated.
            lkey: unsafe { sys::rpcrdma_rs_local_dma_lkey(pd) },
        });
        let verbs = inner.verbs.as_mut().ok_or(EINVAL)?;
        // The send queue and CQ also take the liveness probe and the
        // drain's marker, one each beyond the Sends and registrations.
        // SAFETY: `device` is valid; `ctx` is the pinned `Inner`, which
        // outlives the CQs (they are freed in `Drop` first).
        verbs.send_cq = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_cq(device, ctx, (send_wrs + 2) as c_int) })?;
        // SAFETY: as above.
        verbs.recv_cq = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_cq(device, ctx, (recv_wrs + 1) as c_int) })?;

        let mut attr = sys::ib_qp_init_attr {
            send_cq: verbs.send_cq,
            recv_cq: verbs.recv_cq,
            sq_sig_type: sys::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: sys::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        attr.cap.max_send_wr = send_wrs + 2;
        attr.cap.max_recv_wr = recv_wrs + 1;
        let send_sges = cfg.send_sges.clamp(1, MAX_SEND_SGES);
        attr.cap.max_send_sge = send_sges as u32;
        attr.cap.max_recv_sge = 1;
        // SAFETY: the id, PD and CQs are valid; `attr` lives for the call.
        to_result(unsafe { sys::rdma_create_qp(inner.id.0, pd, &mut attr) })?;
        // SAFETY: `rdma_create_qp` succeeded, so the id holds the QP.
        verbs.qp = unsafe { (*inner.id.0).qp };
        let (lkey, qp) = (verbs.lkey, verbs.qp);

        for index in 0..cfg.send_bufs {
            let data = KVec::from_elem(0u8, cfg.send_buf_size, GFP_KERNEL)?;
            let buf = Buf::new::<T>(device, lkey, data, index, true)?;
            inner.sends.push(buf, GFP_KERNEL)?;
        }
        *inner.send_state.lock() = SendState::new(cfg.send_bufs, cfg.signal_interval)?;
        inner.send_sges = send_sges;
        for index in 0..cfg.recv_bufs {
            let data = cache.take(cfg.recv_buf_size)?;
            let buf = Buf::new::<T>(device, lkey, data, index, false)?;
            inner.recvs.push(buf, GFP_KERNEL)?;
        }
        // An empty stack with room for every Receive.
        let mut pending = FreeList::full(cfg.recv_bufs)?;
        pending.top = 0;
        *inner.repost.lock() = pending;
        inner.recv_batch = cfg.recv_batch.clamp(1, cfg.recv_bufs);
        for index in 0..cfg.mrs {
            let mr = Mr::new::<T>(pd, cfg.mr_pages, index)?;
            inner.mrs.push(mr, GFP_KERNEL)?;
        }
        *inner.free_mrs.lock() = FreeList::full(cfg.mrs)?;

        // Chain every Receive into one post.
        let mut next: *mut sys::ib_recv_wr = ptr::null_mut();
        for buf in inner.recvs.iter().rev() {
            let mut b = buf.cell.lease().ok_or(EINVAL)?;
            b.recv_wr.next = next;
            next = &raw mut b.recv_wr;
            b.hand_off();
        }
        // SAFETY: `qp` is valid; every WR in the chain points at a mapped
        // buffer owned by `inner`, which outlives the QP, and handed off to
        // the device.
        to_result(unsafe { sys::rpcrdma_rs_post_recv(qp, next) })
    }

    /// Starts connecting, sending `private_data`; the outcome arrives as a CM
    /// event.
    pub(crate) fn connect(&self, private_data: &[u8], responder_resources: u8) -> Result {
        let mut param = sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: u8::try_from(private_data.len()).map_err(|_| EINVAL)?,
            responder_resources,
            // The client never issues RDMA Reads.
            initiator_depth: 0,
            // Credits prevent receiver-not-ready: an RNR is a bug, show it.
            flow_control: 0,
            rnr_retry_count: 0,
            retry_count: 6,
            ..Default::default()
        };
        // SAFETY: the id is valid; `param` and the private data live for the
        // call (rdma_cm copies the private data).
        to_result(unsafe { sys::rdma_connect(self.inner.id.0, &mut param) })
    }

    /// Asks the peer to disconnect; flushes every posted work request.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is valid. Disconnecting an unconnected id is harmless.
        let _ = unsafe { sys::rdma_disconnect(self.inner.id.0) };
    }

    /// Sends one message: `fill` builds it, copying bytes into a pre-mapped
    /// buffer and mapping pages in place ([`SendWriter`]). Fails with
    /// `ENOBUFS` when every Send buffer is in flight (wait for
    /// [`ConnHandler::send_done`]).
    ///
    /// Only every few Sends is signalled: a signalled completion gives back
    /// its buffer and every buffer posted before it (the queue pair
    /// completes in order). A Send that mapped pages is always signalled,
    /// so that they are unmapped promptly; the returned token tells the RPC
    /// when its pages are free again.
    ///
    /// The registrations in `reg` are posted in front of the Send; the
    /// returned token owns them until they are invalidated. On failure
    /// nothing was posted and the registration comes back.
    #[inline]
    pub(crate) fn send(
        &self,
        reg: Registration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, PagesInFlight), SendFailed> {
        self.inner.send_registered(reg, fill)
    }

    /// Sends a message that advertises no memory regions; see
    /// [`Connection::send`].
    pub(crate) fn send_unregistered(&self, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<PagesInFlight> {
        self.inner.send(&Registration::empty(), fill)
    }

    /// Receives completed successfully on this connection so far.
    pub(crate) fn receives(&self) -> u64 {
        self.inner.receives.load(Ordering::Relaxed)
    }

    /// Probes the peer: posts a signalled zero-length RDMA Write. It names
    /// no memory and touches none on either side (a zero-length RDMA
    /// operation carries no valid R_Key, IBTA C9-88) and the peer's upper
    /// layer never sees it, but the peer's queue pair must acknowledge it:
    /// if the peer is gone, the device's retries run out and
    /// [`ConnHandler::probe_done`] gets the failure. One probe at a time:
    /// `Ok(false)` if the last one has not completed yet.
    pub(crate) fn probe(&self) -> Result<bool> {
        let inner: &Inner<T> = &self.inner;
        let verbs = inner.verbs.as_ref().ok_or_else(errno::ENOTCONN)?;
        if inner.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        // Away while posted: one probe at a time.
        let Some(mut w) = inner.probe.lease() else { return Ok(false) };
        w.0 = sys::ib_rdma_wr::default();
        w.0.wr.opcode = sys::ib_wr_opcode_IB_WR_RDMA_WRITE;
        w.0.wr.__bindgen_anon_1.wr_cqe = ptr::from_ref(&inner.probe_cqe).cast_mut();
        w.0.wr.send_flags = sys::ib_send_flags_IB_SEND_SIGNALED as c_int;
        let wr = &raw mut w.0.wr;
        w.hand_off();
        // SAFETY: the WR and its CQE are in the pinned `Inner`, which
        // outlives the queue pair; the queue pair has a send slot set aside
        // for the probe (`create_qp`). ib_core only reads the CQE.
        let rc = unsafe { sys::rpcrdma_rs_post_send(verbs.qp, wr) };
        if rc != 0 {
            // SAFETY: the post failed: the device never saw the WR.
            drop(unsafe { inner.probe.take_back() });
            return Err(Error::from_errno(rc));
        }
        inner.counters.probes.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// A count of resource releases (Send buffers, memory regions).
    ///
    /// Closes the lost-wakeup window of "no buffer, wait for space": read
    /// it before trying to send; after a failure with `ENOBUFS`, mark the
    /// transport as waiting (`xprt_wait_for_buffer_space`), then read it
    /// again. If it moved, something was released after the attempt and
    /// its wake-up may have found no waiter: retry at once. If it did not,
    /// every later release sees the waiting mark and wakes the task.
    pub(crate) fn release_epoch(&self) -> u64 {
        core::sync::atomic::fence(Ordering::SeqCst);
        self.inner.released.load(Ordering::Relaxed)
    }

    /// Waits until the Send of `sent` no longer reads its pages; see
    /// [`Live::wait_sent`]. Sleeps.
    pub(crate) fn wait_sent(&self, sent: PagesInFlight) -> SendDone {
        self.inner.wait_sent(sent)
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Registers one memory region for `reg`: `fill` describes its pages
    /// (at most the region's depth), `to_device` is true for a Read chunk
    /// (the server reads our memory) and false for Write and Reply chunks.
    /// The REG_MR work request is posted in front of the next [`send`] with
    /// `reg`. Fails with `ENOBUFS` when no region is free.
    ///
    /// [`send`]: Connection::send
    pub(crate) fn register(
        &self,
        reg: &mut Registration,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<Registered> {
        let verbs = self.inner.verbs.as_ref().ok_or_else(errno::ENOTCONN)?;
        let held = &mut reg.0;
        if held.n >= MAX_MRS || (held.n > 0 && held.generation != self.inner.generation) {
            return Err(EINVAL);
        }
        let index = self.inner.free_mrs.lock().pop().ok_or_else(errno::ENOBUFS)?;
        let give_back = |m: Lease<'_, MrState>| {
            drop(m);
            self.inner.free_mrs.lock().push(index);
        };
        let Some(mr) = self.inner.mrs.get(index) else { return Err(EINVAL) };
        // Idle: it was on the free list.
        let Some(mut m) = mr.cell.lease() else { return Err(EINVAL) };
        let MrState { ibmr, sg, mapped: mapped_ents, to_device: dir, reg_wr, .. } = &mut *m;
        // The table was initialised when the region was made; `push` sets
        // only the entries this registration uses (a one-page chunk does
        // not rewrite the whole table).
        let mut w = SgWriter { sg: sg.as_mut_slice(), n: 0 };
        if let Err(e) = fill(&mut w) {
            give_back(m);
            return Err(e);
        }
        let n = w.n;
        let Some(last) = n.checked_sub(1).and_then(|i| sg.get_mut(i)) else {
            give_back(m);
            return Err(EINVAL);
        };
        // SAFETY: an initialised entry of this region's table.
        unsafe { sys::rpcrdma_rs_sg_mark_end(last) };
        // SAFETY: the entries were just set; the device is valid.
        let nents = unsafe { sys::rpcrdma_rs_dma_map_sg(verbs.device, sg.as_mut_ptr(), n as i32, to_device) };
        if nents <= 0 {
            give_back(m);
            return Err(EIO);
        }
        // SAFETY: the MR is ours (leased); `nents` entries are mapped.
        let mapped = unsafe { sys::ib_map_mr_sg(*ibmr, sg.as_mut_ptr(), nents, ptr::null_mut(), super::PAGE_SIZE) };
        if mapped != nents {
            // SAFETY: mapped just above with these arguments.
            unsafe { sys::rpcrdma_rs_dma_unmap_sg(verbs.device, sg.as_mut_ptr(), n as i32, to_device) };
            give_back(m);
            return Err(EIO);
        }
        *mapped_ents = n as u32;
        *dir = to_device;
        // SAFETY: the region is ours (leased) and valid until `Drop`.
        let seg = unsafe {
            let mr = &mut **ibmr;
            // The XID in the iova's upper half makes captures readable.
            mr.iova = (mr.iova & 0xffff_ffff) | (u64::from(xid) << 32);
            // A new key for every registration: a late access with an old
            // rkey is refused by the HCA.
            sys::rpcrdma_rs_update_fast_reg_key(*ibmr, ((mr.rkey & 0xff) as u8).wrapping_add(1));
            Registered { handle: mr.rkey, length: mr.length as u32, offset: mr.iova }
        };
        reg_wr.wr.next = ptr::null_mut();
        reg_wr.key = seg.handle;
        reg_wr.access = if to_device {
            sys::ib_access_flags_IB_ACCESS_REMOTE_READ as i32
        } else {
            (sys::ib_access_flags_IB_ACCESS_REMOTE_WRITE | sys::ib_access_flags_IB_ACCESS_LOCAL_WRITE) as i32
        };
        // The region now belongs to `reg`, until invalidated or released.
        m.hand_off();
        if held.n == 0 {
            held.generation = self.inner.generation;
        }
        held.mrs[held.n] = mr.index;
        held.n += 1;
        Ok(seg)
    }
}

impl<T: ConnHandler> Inner<T> {
    /// See [`Connection::send`].
    #[inline]
    fn send_registered(
        &self,
        reg: Registration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, PagesInFlight), SendFailed> {
        match self.send(&reg, fill) {
            Ok(sent) => {
                Ok((PostedRegistration(reg.0), sent))
            }
            Err(err) => Err(SendFailed { err, reg }),
        }
    }

    /// Posts the Send, with the REG_MRs of `reg` in front of it; see
    /// [`Connection::send`].
    fn send(&self, reg: &Registration, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<PagesInFlight> {
        let verbs = self.verbs.as_ref().ok_or_else(errno::ENOTCONN)?;
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        if reg.0.n > 0 && reg.0.generation != self.generation {
            return Err(EINVAL);
        }
        let index = {
            let mut st = self.send_state.lock();
            let index = st.free.pop().ok_or_else(errno::ENOBUFS)?;
            // Cannot fail: the queue holds one slot per buffer.
            let _ = st.sq.try_reserve(1);
            index
        };
        let put_back = |b: Option<Lease<'_, BufState>>| {
            if let Some(mut b) = b {
                self.unmap_pages(&mut b.pages);
            }
            let mut st = self.send_state.lock();
            st.sq.unreserve(1);
            st.free.push(index);
        };
        // Idle: its index came off the free list.
        let Some((buf, mut b)) = self.sends.get(index).and_then(|buf| Some((buf, buf.cell.lease()?))) else {
            put_back(None);
            return Err(EINVAL);
        };
        let dma = buf.dma;
        let BufState { data, sge, pages, send_wr, .. } = &mut *b;
        let mut w = SendWriter {
            data: data.as_mut_slice(),
            used: 0,
            sges: sge,
            n: 0,
            max_sge: self.send_sges,
            last_copied: false,
            pages,
            device: verbs.device,
            dma,
            lkey: verbs.lkey,
        };
        let filled = fill(&mut w);
        let (used, nsge, mapped) = (w.used, w.n, w.pages.n > 0);
        if let Err(e) = filled {
            put_back(Some(b));
            return Err(e);
        }
        if nsge == 0 {
            put_back(Some(b));
            return Err(EINVAL);
        }
        // SAFETY: the first `used` bytes of this mapped buffer were written.
        unsafe { sys::rpcrdma_rs_dma_sync_for_device(verbs.device, dma, used) };
        send_wr.num_sge = nsge as c_int;
        // Chain the registrations in front of the Send: one post, and the
        // queue pair's ordering makes the regions valid before the server
        // sees the call.
        let mut head: *mut sys::ib_send_wr = &raw mut *send_wr;
        for &i in reg.0.held().iter().rev() {
            // SAFETY: the region belongs to `reg` (handed off to it by
            // `register`) and holds nothing the device reads: its work
            // request is copied when posted.
            let Some(mut m) = self.mrs.get(usize::from(i)).and_then(|mr| unsafe { mr.cell.take_back() }) else {
                // Not a region `reg` holds: post nothing (the ones chained
                // so far are handed back to `reg` already).
                put_back(Some(b));
                return Err(EINVAL);
            };
            m.reg_wr.wr.next = head;
            head = &raw mut m.reg_wr.wr;
            m.hand_off();
        }
        // Posting and entering the ring happen under one lock, so the ring
        // has the queue pair's order.
        let mut st = self.send_state.lock();
        let signal = st.sq.post(1, mapped);
        b.send_wr.send_flags = if signal.signaled { sys::ib_send_flags_IB_SEND_SIGNALED as c_int } else { 0 };
        b.hand_off();
        // SAFETY: `qp` is valid; every WR in the chain points at memory owned
        // by the connection (buffers, regions) or mapped pages the RPC keeps
        // until the token below is waited for; the buffer is handed off.
        let rc = unsafe { sys::rpcrdma_rs_post_send(verbs.qp, head) };
        if rc != 0 {
            drop(st);
            // SAFETY: the post failed: the Send never reached the device.
            put_back(unsafe { buf.cell.take_back() });
            return Err(Error::from_errno(rc));
        }
        let seq = st.push_posted(index);
        drop(st);
        self.counters.sends.fetch_add(1, Ordering::Relaxed);
        // Most Sends are neither: skip the locked adds of zero.
        if signal.signaled {
            self.counters.sends_signalled.fetch_add(1, Ordering::Relaxed);
        }
        if mapped {
            self.counters.sends_mapped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(if mapped { PagesInFlight { generation: self.generation, index, seq } } else { PagesInFlight::none() })
    }

    /// Gives back the regions of a token whose REG_MR requests were never
    /// posted (the call was not sent).
    pub(crate) fn release_unposted(&self, reg: Registration) -> Invalidated {
        let held = reg.0;
        if held.generation != self.generation {
            return Invalidated(());
        }
        for &i in held.held() {
            if let Some(mut m) = self.take_back_mr(i) {
                self.unmap(&mut m);
                drop(m);
                self.free_mrs.lock().push(usize::from(i));
                self.note_release();
            }
        }
        Invalidated(())
    }

    /// Takes back region `i` from the token that held it.
    fn take_back_mr(&self, i: u16) -> Option<Lease<'_, MrState>> {
        // SAFETY: the state of a region holds nothing the device reads (its
        // work requests are copied when posted, its scatterlist when
        // mapped); the caller consumed the token that held it.
        unsafe { self.mrs.get(usize::from(i))?.cell.take_back() }
    }

    /// Invalidates the regions of `reg` and takes them back; the region
    /// whose rkey the server already invalidated (Send With Invalidate) is
    /// skipped. Sleeps until the LOCAL_INV work requests complete. Returns
    /// how many regions needed a LOCAL_INV. A token from an earlier
    /// connection holds nothing and is simply emptied.
    pub(crate) fn invalidate(&self, reg: PostedRegistration, remotely_invalidated: Option<u32>) -> (Invalidated, usize) {
        let held = reg.0;
        let Some(verbs) = self.verbs.as_ref() else { return (Invalidated(()), 0) };
        if held.generation != self.generation || held.n == 0 {
            return (Invalidated(()), 0);
        }
        let mut chain: *mut sys::ib_send_wr = ptr::null_mut();
        let mut last: Option<&Mr> = None;
        let mut local = 0;
        let mut remote_seen = false;
        for &i in held.held().iter().rev() {
            let Some(mr) = self.mrs.get(usize::from(i)) else { continue };
            let Some(mut m) = self.take_back_mr(i) else { continue };
            // SAFETY: the region is valid until `Drop`, and ours (leased).
            let rkey = unsafe { (*m.ibmr).rkey };
            if !remote_seen && remotely_invalidated == Some(rkey) {
                remote_seen = true;
                m.hand_off();
                continue;
            }
            mr.inv_done.store(false, Ordering::Relaxed);
            let wr = &mut m.inv_wr;
            wr.next = chain;
            wr.ex.invalidate_rkey = rkey;
            // Only the last LOCAL_INV is signalled: the queue pair
            // completes work requests in order.
            wr.send_flags = if last.is_none() { sys::ib_send_flags_IB_SEND_SIGNALED } else { 0 };
            chain = wr;
            m.hand_off();
            if last.is_none() {
                last = Some(mr);
            }
            local += 1;
        }
        let mut broken = false;
        if let Some(last) = last {
            let dying = self.dying.load(Ordering::Acquire);
            let rc = if dying {
                -1
            } else if self.handler.inject_local_inv_failure() {
                EIO.to_errno()
            } else {
                // SAFETY: the QP is valid; the chain's WRs belong to our regions.
                unsafe { sys::rpcrdma_rs_post_send(verbs.qp, chain) }
            };
            if rc != 0 {
                broken = true;
                // The regions keep live rkeys. Before the caller may give
                // their pages back (and complete the RPC), the queue pair
                // goes to the error state, so that no RDMA operation of the
                // peer reaches them (RFC 8166 section 4.5.4): rdma_disconnect
                // does that synchronously, then asks the peer to disconnect.
                // A dying connection's teardown does the same.
                // SAFETY: the id is valid while the connection exists, and
                // disconnecting twice is harmless.
                let _ = unsafe { sys::rdma_disconnect(self.id.0) };
                if !dying {
                    self.handler.invalidate_failed();
                }
            } else {
                let mut g = self.free_mrs.lock();
                while !last.inv_done.load(Ordering::Acquire) {
                    self.inv_wait.wait(&mut g);
                }
                drop(g);
                broken = !last.inv_ok.load(Ordering::Acquire);
            }
        }
        for &i in held.held() {
            let Some(mut m) = self.take_back_mr(i) else { continue };
            self.unmap(&mut m);
            drop(m);
            // A region whose invalidation failed keeps a live rkey: never
            // reuse it; the connection is going away and deregisters it.
            if !broken {
                self.free_mrs.lock().push(usize::from(i));
                self.note_release();
            }
        }
        (Invalidated(()), local)
    }

    /// Records that resources came back, before the caller wakes waiters.
    fn note_release(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `release_epoch`: either the waiter sees
        // this bump, or its "waiting" flag is visible to our wake-up.
        core::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Unmaps the pages a Send buffer carried; true if there were any.
    /// The caller holds the buffer (a sender that did not post it, or the
    /// completion that took it off the ring).
    fn unmap_pages(&self, pages: &mut MappedPages) -> bool {
        let Some(verbs) = self.verbs.as_ref() else { return false };
        // SAFETY: the pages were mapped on this device and the HCA is done
        // with them (their Send completed, or was never posted).
        unsafe { pages.unmap(verbs.device) > 0 }
    }

    /// Gives back `index` and every Send posted before it: a completion of
    /// it proves them all done.
    fn reclaim_sends(&self, index: usize) {
        let mut st = self.send_state.lock();
        if !st.is_posted(index) {
            // Already reclaimed by a later signalled completion (a flushed
            // unsignalled Send reports itself too).
            return;
        }
        let mut n = 0;
        let mut mapped = false;
        while let Some(i) = st.pop_posted() {
            n += 1;
            // SAFETY: a completion of `index` proves every Send posted
            // before it done too (the queue pair completes in order).
            if let Some(mut b) = self.sends.get(i).and_then(|b| unsafe { b.cell.take_back() }) {
                mapped |= self.unmap_pages(&mut b.pages);
            }
            st.free.push(i);
            if i == index {
                break;
            }
        }
        st.sq.complete(n);
        drop(st);
        self.note_release();
        if mapped {
            self.send_wait.notify_all();
        }
    }

    /// Waits until the Send of `sent` no longer reads the RPC's pages, and
    /// empties the token. Sleeps; the wait is bounded by the queue pair's
    /// retry limit (a dead connection flushes every Send).
    #[inline]
    fn wait_sent(&self, t: PagesInFlight) -> SendDone {
        if t.is_none() || t.generation != self.generation {
            return SendDone(());
        }
        let mut st = self.send_state.lock();
        while st.is_posted(t.index) && st.seq.get(t.index) == Some(&t.seq) {
            self.send_wait.wait(&mut st);
        }
        SendDone(())
    }

    #[inline]
    fn unmap(&self, m: &mut MrState) {
        if let Some(verbs) = self.verbs.as_ref() {
            // SAFETY: the region's entries were mapped on this device and
            // the HCA is done with them.
            unsafe { m.unmap(verbs.device) };
        }
    }
}

/// The connection a completion handler runs on, borrowed for the call.
pub(crate) struct Live<'a, T: ConnHandler>(&'a Inner<T>);

impl<T: ConnHandler> Live<'_, T> {
    /// True if what `reg` and `sent` hold (if anything) was registered or
    /// sent on this connection. A reply that arrives on a connection being
    /// torn down, for a call already sent again on its successor, finds
    /// the successor's tokens in the slot: they are not this connection's
    /// to invalidate or wait for.
    pub(crate) fn owns(&self, reg: &PostedRegistration, sent: &PagesInFlight) -> bool {
        let g = self.0.generation;
        (reg.is_empty() || reg.0.generation == g) && (sent.is_none() || sent.generation == g)
    }

    /// See [`Connection::invalidate`].
    pub(crate) fn invalidate(&self, reg: PostedRegistration, remotely_invalidated: Option<u32>) -> (Invalidated, usize) {
        self.0.invalidate(reg, remotely_invalidated)
    }

    /// Waits until the Send that carried `sent`'s pages completed, so the
    /// RPC may give them back. Sleeps.
    pub(crate) fn wait_sent(&self, sent: PagesInFlight) -> SendDone {
        self.0.wait_sent(sent)
    }

    /// Sends one message that advertises no memory regions from a
    /// completion handler; see [`Connection::send`].
    pub(crate) fn send_unregistered(&self, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<PagesInFlight> {
        self.0.send(&Registration::empty(), fill)
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Gives back the regions of a token whose REG_MR requests were never
    /// posted (the call was not sent).
    pub(crate) fn release_unposted(&self, reg: Registration) -> Invalidated {
        self.inner.release_unposted(reg)
    }

    /// Invalidates the regions of `reg` and takes them back; see
    /// [`Live::invalidate`]. Sleeps.
    pub(crate) fn invalidate(&self, reg: PostedRegistration, remotely_invalidated: Option<u32>) -> (Invalidated, usize) {
        self.inner.invalidate(reg, remotely_invalidated)
    }
}

impl Mr {
    fn new<T: ConnHandler>(pd: *mut sys::ib_pd, pages: u32, index: usize) -> Result<Pin<KBox<Mr>>> {
        // SAFETY: `pd` is valid.
        let ibmr = from_err_ptr(unsafe { sys::ib_alloc_mr(pd, sys::ib_mr_type_IB_MR_TYPE_MEM_REG, pages) })?;
        let mut sg = match KVec::from_elem(sys::scatterlist::default(), pages as usize, GFP_KERNEL) {
            Ok(sg) => sg,
            Err(e) => {
                // SAFETY: allocated above, never used.
                unsafe { sys::rpcrdma_rs_dereg_mr(ibmr) };
                return Err(e.into());
            }
        };
        // SAFETY: `sg` has `pages` entries.
        unsafe { sys::sg_init_table(sg.as_mut_ptr(), pages) };
        let mr = KBox::pin(
            Mr {
                reg_cqe: sys::ib_cqe { done: Some(reg_done::<T>) },
                inv_cqe: sys::ib_cqe { done: Some(inv_done::<T>) },
                inv_done: AtomicBool::new(false),
                inv_ok: AtomicBool::new(false),
                index: u16::try_from(index).map_err(|_| EINVAL)?,
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
        )
        .inspect_err(|_| {
            // SAFETY: allocated above, never used.
            unsafe { sys::rpcrdma_rs_dereg_mr(ibmr) };
        })?;
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
}

impl Buf {
    fn new<T: ConnHandler>(
        device: *mut sys::ib_device,
        lkey: u32,
        mut data: KVec<u8>,
        index: usize,
        send: bool,
    ) -> Result<Pin<KBox<Buf>>> {
        let size = data.len();
        // SAFETY: `device` is valid; `data` is a kmalloc'ed buffer that stays
        // put (a KVec's heap storage never moves unless it grows, and it never
        // grows) until `Drop` unmaps it.
        let dma = unsafe {
            if send {
                sys::rpcrdma_rs_dma_map_to_device(device, data.as_mut_ptr().cast(), size)
            } else {
                sys::rpcrdma_rs_dma_map_from_device(device, data.as_mut_ptr().cast(), size)
            }
        };
        // SAFETY: `device` is valid.
        if unsafe { sys::rpcrdma_rs_dma_mapping_error(device, dma) } != 0 {
            return Err(ENOMEM);
        }
        let buf = KBox::pin(
            Buf {
                cqe: sys::ib_cqe { done: Some(if send { send_done::<T> } else { recv_done::<T> }) },
                dma,
                index,
                cell: LeaseCell::new(BufState {
                    data,
                    sge: [sys::ib_sge { addr: dma, length: size as u32, lkey }; MAX_SEND_SGES],
                    send_wr: Default::default(),
                    recv_wr: Default::default(),
                    pages: MappedPages { dma: [0; MAX_SEND_SGES], len: [0; MAX_SEND_SGES], n: 0 },
                }),
            },
            GFP_KERNEL,
        )
        .inspect_err(|_| {
            // SAFETY: mapped just above; nothing else knows the address.
            unsafe { unmap(device, dma, size, send) };
        })?;
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
}

/// # Safety
///
/// `dma` must be a live mapping of `len` bytes on `device` in that direction.
unsafe fn unmap(device: *mut sys::ib_device, dma: u64, len: usize, send: bool) {
    // SAFETY: per the function's contract.
    unsafe {
        if send {
            sys::rpcrdma_rs_dma_unmap_to_device(device, dma, len);
        } else {
            sys::rpcrdma_rs_dma_unmap_from_device(device, dma, len);
        }
    }
}

impl<T: ConnHandler> Drop for Connection<T> {
    fn drop(&mut self) {
        // First the queue pair goes, while completion handlers may still
        // run: they see the connection as it was (`verbs` in place), so a
        // Send reclaimed by the drain unmaps its pages and wakes the RPC
        // waiting for them. That RPC may be a reply being processed on the
        // receive CQ, which the drain of the Receive queue waits for.
        let inner: &Inner<T> = &self.inner;
        inner.dying.store(true, Ordering::Release);
        if let Some(v) = inner.verbs.as_ref() {
            // SAFETY: the id and the verbs objects are valid until freed
            // below. The drain makes every posted WR complete, so after it
            // the HCA holds no buffer; freeing a CQ waits for its running
            // handlers, and none starts afterwards.
            unsafe {
                if !v.qp.is_null() {
                    let _ = sys::rdma_disconnect(inner.id.0);
                    sys::ib_drain_qp(v.qp);
                    sys::rdma_destroy_qp(inner.id.0);
                }
                if !v.send_cq.is_null() {
                    sys::ib_free_cq(v.send_cq);
                }
                if !v.recv_cq.is_null() {
                    sys::ib_free_cq(v.recv_cq);
                }
            }
        }
        // No completion handler runs any more: the rest is ours alone (the
        // CM event handler, until the id goes, touches neither the buffers
        // nor the regions).
        // SAFETY: nothing is moved out of the pinned allocation.
        let inner = unsafe { self.inner.as_mut().get_unchecked_mut() };
        if let Some(v) = inner.verbs.take() {
            // Each object is released once, after the queue pair and CQs
            // that used it.
            for buf in inner.sends.iter_mut() {
                let dma = buf.dma;
                let b = buf_state(buf);
                // SAFETY: the drain completed every Send, so the device is
                // done with the buffer and with the pages of Sends no
                // completion reclaimed (none should be left); each mapping
                // is released once.
                unsafe {
                    b.pages.unmap(v.device);
                    unmap(v.device, dma, b.data.len(), true);
                }
            }
            for buf in inner.recvs.iter_mut() {
                let len = buf_state(buf).data.len();
                // SAFETY: as above, for the Receives.
                unsafe { unmap(v.device, buf.dma, len, false) };
            }
            // Unmapped, the Receive buffers are plain memory again: the
            // transport's next connection maps them on its device.
            if let Some(cache) = inner.recv_cache.take() {
                cache.give_back(&mut inner.recvs);
            }
            for mr in inner.mrs.iter_mut() {
                // SAFETY: nothing is moved out of the pinned allocation.
                let m = unsafe { mr.as_mut().get_unchecked_mut() }.cell.get_mut();
                // SAFETY: the region was mapped on this device; after the
                // drain nothing uses it, and it is deregistered once, after
                // the queue pair that used it.
                unsafe {
                    m.unmap(v.device);
                    sys::rpcrdma_rs_dereg_mr(m.ibmr);
                }
            }
            // SAFETY: after everything allocated on it.
            unsafe { sys::rpcrdma_rs_dealloc_pd(v.pd) };
        }
        // SAFETY: created in `new`; this waits for a running event handler,
        // after which none can start.
        unsafe { sys::rdma_destroy_id(inner.id.0) };
    }
}

/// The state of a buffer through the only reference to it (teardown).
fn buf_state(buf: &mut Pin<KBox<Buf>>) -> &mut BufState {
    // SAFETY: nothing is moved out of the pinned allocation.
    unsafe { buf.as_mut().get_unchecked_mut() }.cell.get_mut()
}

/// Recovers the connection and buffer of a completion.
///
/// # Safety
///
/// `cq` must be one of a live `Inner<T>`'s CQs and `wc` a completion whose
/// `wr_cqe` is the CQE of one of its buffers.
unsafe fn completion<'a, T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) -> (&'a Inner<T>, &'a Buf, &'a sys::ib_wc) {
    // SAFETY: per the contract, `cq_context` is the `Inner<T>` and `wr_cqe`
    // is the `cqe` field of a `Buf` it owns; both outlive this completion.
    unsafe {
        let inner = &*(*cq).cq_context.cast::<Inner<T>>();
        let wc = &*wc;
        let cqe = wc.__bindgen_anon_1.wr_cqe;
        let buf = &*cqe.cast::<u8>().sub(offset_of!(Buf, cqe)).cast::<Buf>();
        (inner, buf, wc)
    }
}

/// Receive completion handler.
///
/// # Safety
///
/// Called by ib_core for a Receive posted by a [`Connection<T>`].
unsafe extern "C" fn recv_done<T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (inner, buf, wc) = unsafe { completion::<T>(cq, wc) };
    match Completion::of(wc) {
        Completion::Ok => {}
        Completion::Flushed => return,
        Completion::Failed(status) => {
            inner.handler.receive_failed(status);
            return;
        }
    }
    let Some(verbs) = inner.verbs.as_ref() else { return };
    // SAFETY: the Receive completed: the HCA is done writing the buffer.
    let Some(b) = (unsafe { buf.cell.take_back() }) else { return };
    // This handler never runs twice at once (one CQ): no locked add.
    inner.receives.store(inner.receives.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    let len = (wc.byte_len as usize).min(b.data.len());
    // SAFETY: the HCA wrote `len` bytes into this mapped buffer, which is
    // ours (leased) until we repost it below.
    unsafe { sys::rpcrdma_rs_dma_sync_for_cpu(verbs.device, buf.dma, len) };
    let invalidated_rkey = if wc.wc_flags & sys::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int != 0 {
        // SAFETY: `ex` holds the invalidated rkey when the flag is set.
        Some(unsafe { wc.ex.invalidate_rkey })
    } else {
        None
    };
    inner.handler.received(Live(inner), Received { data: b.data.get(..len).unwrap_or(&[]), invalidated_rkey });
    drop(b);
    if inner.dying.load(Ordering::Acquire) {
        return;
    }
    // Repost in batches: one chained post (one doorbell) per `recv_batch`
    // Receives. The spares posted at connect time cover those held back.
    let mut pending = inner.repost.lock();
    pending.push(buf.index);
    if pending.top < inner.recv_batch {
        return;
    }
    let mut chain: *mut sys::ib_recv_wr = ptr::null_mut();
    while let Some(i) = pending.pop() {
        // Idle: its Receive completed and was processed.
        let Some(mut b) = inner.recvs.get(i).and_then(|b| b.cell.lease()) else { continue };
        b.recv_wr.next = chain;
        chain = &raw mut b.recv_wr;
        b.hand_off();
    }
    drop(pending);
    // SAFETY: the QP is valid while completions run; every WR in the chain
    // describes a mapped buffer the connection owns, handed off to the
    // device.
    let rc = unsafe { sys::rpcrdma_rs_post_recv(verbs.qp, chain) };
    if rc != 0 {
        inner.handler.receive_failed(u32::MAX);
    }
}

/// Send completion handler.
///
/// # Safety
///
/// Called by ib_core for a Send posted by a [`Connection<T>`].
unsafe extern "C" fn send_done<T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (inner, buf, wc) = unsafe { completion::<T>(cq, wc) };
    inner.reclaim_sends(buf.index);
    inner.handler.send_done(Completion::of(wc));
}

/// Liveness probe completion.
///
/// # Safety
///
/// Called by ib_core for the probe posted by [`Connection::probe`] of a
/// live `Inner<T>`, whose send CQ `cq` is.
unsafe extern "C" fn probe_done<T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the contract, `cq_context` is the `Inner<T>`, which
    // outlives its CQs, and `wc` is valid for the call.
    let (inner, wc) = unsafe { (&*(*cq).cq_context.cast::<Inner<T>>(), &*wc) };
    let how = Completion::of(wc);
    // SAFETY: the probe completed: the WR is no longer posted, and the next
    // probe may reuse it.
    drop(unsafe { inner.probe.take_back() });
    inner.handler.probe_done(how);
}

/// Recovers the connection and memory region of a REG_MR or LOCAL_INV
/// completion.
///
/// # Safety
///
/// As for [`completion`], with `wr_cqe` the CQE at `offset` in an `Mr`.
unsafe fn mr_completion<'a, T: ConnHandler>(
    cq: *mut sys::ib_cq,
    wc: *mut sys::ib_wc,
    offset: usize,
) -> (&'a Inner<T>, &'a Mr, &'a sys::ib_wc) {
    // SAFETY: per the contract.
    unsafe {
        let inner = &*(*cq).cq_context.cast::<Inner<T>>();
        let wc = &*wc;
        let mr = &*wc.__bindgen_anon_1.wr_cqe.cast::<u8>().sub(offset).cast::<Mr>();
        (inner, mr, wc)
    }
}

/// REG_MR completion: reported only when it failed or was flushed.
///
/// # Safety
///
/// Called by ib_core for a REG_MR posted by a [`Connection<T>`].
unsafe extern "C" fn reg_done<T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (inner, _mr, wc) = unsafe { mr_completion::<T>(cq, wc, offset_of!(Mr, reg_cqe)) };
    if let Completion::Failed(status) = Completion::of(wc) {
        inner.handler.receive_failed(status);
    }
}

/// LOCAL_INV completion: wakes the invalidating thread.
///
/// # Safety
///
/// Called by ib_core for a LOCAL_INV posted by a [`Connection<T>`].
unsafe extern "C" fn inv_done<T: ConnHandler>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (inner, mr, wc) = unsafe { mr_completion::<T>(cq, wc, offset_of!(Mr, inv_cqe)) };
    let how = Completion::of(wc);
    let g = inner.free_mrs.lock();
    mr.inv_ok.store(how == Completion::Ok, Ordering::Release);
    mr.inv_done.store(true, Ordering::Release);
    drop(g);
    inner.inv_wait.notify_all();
    if let Completion::Failed(status) = how {
        inner.handler.receive_failed(status);
    }
}

/// rdma_cm event handler.
///
/// # Safety
///
/// Called by rdma_cm for an id created by [`Connection::new`], whose context
/// is the connection's pinned `Inner<T>`.
unsafe extern "C" fn cm_handler<T: ConnHandler>(id: *mut sys::rdma_cm_id, event: *mut sys::rdma_cm_event) -> c_int {
    // SAFETY: per the contract; the id and event are valid for the call.
    let (inner, ev) = unsafe { (&*(*id).context.cast::<Inner<T>>(), &*event) };
    let pdata = || -> &[u8] {
        // SAFETY: for connection events `param.conn` describes the peer's
        // private data, valid for the duration of the handler.
        unsafe {
            let conn = &ev.param.conn;
            if conn.private_data.is_null() {
                &[]
            } else {
                core::slice::from_raw_parts(conn.private_data.cast::<u8>(), conn.private_data_len.into())
            }
        }
    };
    let status = ev.status;
    let event = match ev.event {
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => CmEvent::AddrResolved,
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => CmEvent::AddrError(status),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => CmEvent::RouteResolved,
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => CmEvent::RouteError(status),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => CmEvent::Established(pdata()),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => CmEvent::Rejected(status, pdata()),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => CmEvent::Unreachable(status),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => CmEvent::ConnectError(status),
        sys::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => CmEvent::Disconnected,
        sys::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => CmEvent::DeviceRemoval,
        sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => CmEvent::AddrChange,
        _ => CmEvent::Other,
    };
    inner.handler.cm_event(event);
    0
}
