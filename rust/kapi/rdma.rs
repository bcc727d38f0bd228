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
    sync::atomic::{AtomicBool, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{from_err_ptr, to_result, Error, Result},
    ffi::{c_int, c_void},
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
    types::Opaque,
};

use super::errno;
use crate::sys;

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
    #[allow(dead_code)] // Read once chunks are registered with FRWR.
    pub(crate) invalidated_rkey: Option<u32>,
}

/// The transport logic riding on a [`Connection`].
pub(crate) trait ConnHandler: Send + Sync + Sized {
    /// An rdma_cm event arrived. Runs in the CM's work context; must not
    /// destroy the connection.
    fn cm_event(&self, event: CmEvent<'_>);

    /// A Receive completed successfully. The buffer is reposted when this
    /// returns: copy out what must be kept.
    fn received(&self, msg: Received<'_>);

    /// A Receive failed (not flushed): the connection must be dropped.
    fn receive_failed(&self, status: u32);

    /// A Send completed; its buffer is free again.
    fn send_done(&self, how: Completion);
}

/// What a device can do, read after address resolution.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceCaps {
    /// Largest number of work requests in one queue.
    pub(crate) max_qp_wr: u32,
    /// Largest number of SGEs in a Send.
    #[allow(dead_code)] // Read once calls are sent from mapped pages.
    pub(crate) max_send_sge: u32,
    /// Largest number of RDMA Reads the device accepts in flight per QP.
    pub(crate) max_qp_rd_atom: u32,
}

/// Queue pair and buffer sizing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpConfig {
    /// Send buffers (= Sends that may be outstanding).
    pub(crate) send_bufs: usize,
    /// Bytes in each Send buffer.
    pub(crate) send_buf_size: usize,
    /// Receive buffers (all posted all the time).
    pub(crate) recv_bufs: usize,
    /// Bytes in each Receive buffer.
    pub(crate) recv_buf_size: usize,
}

/// A pre-mapped buffer and the work request that carries it.
struct Buf {
    cqe: Opaque<sys::ib_cqe>,
    sge: Opaque<sys::ib_sge>,
    send_wr: Opaque<sys::ib_send_wr>,
    recv_wr: Opaque<sys::ib_recv_wr>,
    data: KVec<u8>,
    dma: u64,
    index: usize,
}

struct Verbs {
    device: *mut sys::ib_device,
    pd: *mut sys::ib_pd,
    send_cq: *mut sys::ib_cq,
    recv_cq: *mut sys::ib_cq,
    qp: *mut sys::ib_qp,
    lkey: u32,
}

/// Indices of idle Send buffers: a stack with room for all of them, so that
/// push and pop never allocate.
struct FreeList {
    slots: KVec<usize>,
    top: usize,
}

impl FreeList {
    fn pop(&mut self) -> Option<usize> {
        let top = self.top.checked_sub(1)?;
        let v = *self.slots.get(top)?;
        self.top = top;
        Some(v)
    }

    fn push(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(self.top) {
            *slot = index;
            self.top += 1;
        }
    }
}

#[pin_data]
struct Inner<T: ConnHandler> {
    handler: Arc<T>,
    id: *mut sys::rdma_cm_id,
    verbs: Option<Verbs>,
    sends: KVec<Pin<KBox<Buf>>>,
    recvs: KVec<Pin<KBox<Buf>>>,
    #[pin]
    free_sends: SpinLock<FreeList>,
    /// Set before draining: completions must not repost.
    dying: AtomicBool,
}

/// An RDMA connection and the buffers posted on it.
pub(crate) struct Connection<T: ConnHandler> {
    inner: Pin<KBox<Inner<T>>>,
}

// SAFETY: the raw pointers are to ib_core objects this connection owns; ib_core
// serialises access to them itself, and the Rust-side state is behind atomics
// and a spinlock.
unsafe impl<T: ConnHandler> Send for Inner<T> {}
// SAFETY: see `Send`.
unsafe impl<T: ConnHandler> Sync for Inner<T> {}

impl<T: ConnHandler> Connection<T> {
    /// Creates the rdma_cm identifier in `net`; events go to `handler`.
    ///
    /// # Safety
    ///
    /// `net` must be a valid network namespace that outlives the connection.
    pub(crate) unsafe fn new(net: *mut sys::net, handler: Arc<T>) -> Result<Self> {
        let inner = KBox::pin_init(
            pin_init!(Inner {
                handler,
                id: ptr::null_mut(),
                verbs: None,
                sends: KVec::new(),
                recvs: KVec::new(),
                free_sends <- new_spinlock!(FreeList { slots: KVec::new(), top: 0 }, "rpcrdma_rs:free_sends"),
                dying: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        let ctx = (&*inner as *const Inner<T>).cast_mut().cast::<c_void>();
        // SAFETY: `ctx` points to the pinned `Inner`, which outlives the id:
        // `Drop` destroys the id (waiting for running handlers) before freeing
        // it. `net` is valid per the caller.
        let id = from_err_ptr(unsafe { sys::rpcrdma_rs_create_id(net, Some(cm_handler::<T>), ctx) })?;
        let mut conn = Connection { inner };
        // SAFETY: only the `id` field is written; nothing is moved out of the
        // pinned allocation.
        unsafe { conn.inner.as_mut().get_unchecked_mut().id = id };
        Ok(conn)
    }

    /// The handler given to [`Connection::new`].
    pub(crate) fn handler(&self) -> &Arc<T> {
        &self.inner.handler
    }

    /// Starts resolving `dst` to a device and address; the outcome arrives as
    /// [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    ///
    /// # Safety
    ///
    /// `dst` must point to a valid socket address for the duration of the call.
    pub(crate) unsafe fn resolve_addr(&self, dst: *const sys::sockaddr, timeout_ms: u32) -> Result {
        // SAFETY: the id is valid (type invariant) and `dst` per the caller.
        to_result(unsafe { sys::rdma_resolve_addr(self.inner.id, ptr::null_mut(), dst, timeout_ms as _) })
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: the id is valid (type invariant).
        to_result(unsafe { sys::rdma_resolve_route(self.inner.id, timeout_ms as _) })
    }

    /// The resolved device's capabilities (after [`CmEvent::AddrResolved`]).
    pub(crate) fn device_caps(&self) -> Result<DeviceCaps> {
        // SAFETY: the id is valid; `device` is set by address resolution and
        // stays valid while the id holds it.
        let device = unsafe { (*self.inner.id).device };
        if device.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: `device` is valid (above); `attrs` is plain data.
        let attrs = unsafe { &(*device).attrs };
        Ok(DeviceCaps {
            max_qp_wr: u32::try_from(attrs.max_qp_wr).unwrap_or(0),
            max_send_sge: u32::try_from(attrs.max_send_sge).unwrap_or(0),
            max_qp_rd_atom: u32::try_from(attrs.max_qp_rd_atom).unwrap_or(0),
        })
    }

    /// The resolved device's name, for messages.
    pub(crate) fn device_name(&self) -> Option<&kernel::str::CStr> {
        // SAFETY: as in `device_caps`.
        let device = unsafe { (*self.inner.id).device };
        if device.is_null() {
            return None;
        }
        // SAFETY: `device` is valid while the id holds it, and so is its name.
        Some(unsafe { kernel::str::CStr::from_char_ptr(sys::rpcrdma_rs_ib_device_name(device)) })
    }

    /// Creates the PD, CQs, RC queue pair and buffers, and posts every
    /// Receive. Call once, after route resolution.
    pub(crate) fn create_qp(&mut self, cfg: QpConfig) -> Result {
        if self.inner.verbs.is_some() || cfg.send_bufs == 0 || cfg.recv_bufs == 0 {
            return Err(EINVAL);
        }
        // SAFETY: only fields are written; nothing moves out of the pin.
        let inner = unsafe { self.inner.as_mut().get_unchecked_mut() };
        // SAFETY: the id is valid and resolved, so `device` is set.
        let device = unsafe { (*inner.id).device };
        if device.is_null() {
            return Err(EINVAL);
        }
        let send_wrs = u32::try_from(cfg.send_bufs).map_err(|_| EINVAL)?;
        let recv_wrs = u32::try_from(cfg.recv_bufs).map_err(|_| EINVAL)?;
        let ctx = (inner as *const Inner<T>).cast_mut().cast::<c_void>();

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
        // The send CQ also takes the drain's marker completion.
        // SAFETY: `device` is valid; `ctx` is the pinned `Inner`, which
        // outlives the CQs (they are freed in `Drop` first).
        verbs.send_cq = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_cq(device, ctx, (send_wrs + 1) as c_int) })?;
        // SAFETY: as above.
        verbs.recv_cq = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_cq(device, ctx, (recv_wrs + 1) as c_int) })?;

        let mut attr = sys::ib_qp_init_attr {
            send_cq: verbs.send_cq,
            recv_cq: verbs.recv_cq,
            sq_sig_type: sys::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: sys::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        attr.cap.max_send_wr = send_wrs + 1;
        attr.cap.max_recv_wr = recv_wrs + 1;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        // SAFETY: the id, PD and CQs are valid; `attr` lives for the call.
        to_result(unsafe { sys::rdma_create_qp(inner.id, pd, &mut attr) })?;
        // SAFETY: `rdma_create_qp` succeeded, so the id holds the QP.
        verbs.qp = unsafe { (*inner.id).qp };
        let (lkey, qp) = (verbs.lkey, verbs.qp);

        let mut free = KVec::from_elem(0usize, cfg.send_bufs, GFP_KERNEL)?;
        for index in 0..cfg.send_bufs {
            let buf = Buf::new::<T>(device, lkey, cfg.send_buf_size, index, true)?;
            inner.sends.push(buf, GFP_KERNEL)?;
            if let Some(slot) = free.get_mut(index) {
                *slot = index;
            }
        }
        *inner.free_sends.lock() = FreeList { slots: free, top: cfg.send_bufs };
        for index in 0..cfg.recv_bufs {
            let buf = Buf::new::<T>(device, lkey, cfg.recv_buf_size, index, false)?;
            inner.recvs.push(buf, GFP_KERNEL)?;
        }
        // Chain every Receive into one post.
        let mut next: *mut sys::ib_recv_wr = ptr::null_mut();
        for buf in inner.recvs.iter().rev() {
            // SAFETY: the WR is ours and not posted yet.
            unsafe { (*buf.recv_wr.get()).next = next };
            next = buf.recv_wr.get();
        }
        // SAFETY: `qp` is valid; every WR in the chain points at a mapped
        // buffer owned by `inner`, which outlives the QP.
        to_result(unsafe { sys::rpcrdma_rs_post_recv(qp, next) })?;
        for buf in inner.recvs.iter() {
            // SAFETY: the chain has been handed over; unlink for reposts.
            unsafe { (*buf.recv_wr.get()).next = ptr::null_mut() };
        }
        Ok(())
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
        to_result(unsafe { sys::rdma_connect(self.inner.id, &mut param) })
    }

    /// Asks the peer to disconnect; flushes every posted work request.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is valid. Disconnecting an unconnected id is harmless.
        let _ = unsafe { sys::rdma_disconnect(self.inner.id) };
    }

    /// Sends one message: `fill` writes it into a pre-mapped buffer and
    /// returns its length. Fails with `ENOBUFS` when every Send buffer is in
    /// flight (wait for [`ConnHandler::send_done`]).
    pub(crate) fn send(&self, fill: impl FnOnce(&mut [u8]) -> Result<usize>) -> Result {
        let verbs = self.inner.verbs.as_ref().ok_or_else(errno::ENOTCONN)?;
        if self.inner.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        let index = self.inner.free_sends.lock().pop().ok_or_else(errno::ENOBUFS)?;
        let Some(buf) = self.inner.sends.get(index) else {
            return Err(EINVAL);
        };
        let put_back = || {
            self.inner.free_sends.lock().push(index);
        };
        // SAFETY: the buffer is ours alone: its index was on the free list, so
        // it is neither posted nor filled by anyone else.
        let data = unsafe { core::slice::from_raw_parts_mut(buf.data.as_ptr().cast_mut(), buf.data.len()) };
        let len = match fill(data) {
            Ok(len) if len <= data.len() => len,
            Ok(_) => {
                put_back();
                return Err(EINVAL);
            }
            Err(e) => {
                put_back();
                return Err(e);
            }
        };
        // SAFETY: the SGE and WR belong to this idle buffer.
        unsafe {
            (*buf.sge.get()).length = len as u32;
            sys::rpcrdma_rs_dma_sync_for_device(verbs.device, buf.dma, len);
        }
        // SAFETY: `qp` is valid; the WR points at a mapped buffer owned by the
        // connection, which outlives the QP.
        let rc = unsafe { sys::rpcrdma_rs_post_send(verbs.qp, buf.send_wr.get()) };
        if rc != 0 {
            put_back();
            return Err(Error::from_errno(rc));
        }
        Ok(())
    }
}

impl Buf {
    fn new<T: ConnHandler>(
        device: *mut sys::ib_device,
        lkey: u32,
        size: usize,
        index: usize,
        send: bool,
    ) -> Result<Pin<KBox<Buf>>> {
        let mut data = KVec::from_elem(0u8, size, GFP_KERNEL)?;
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
                cqe: Opaque::new(sys::ib_cqe {
                    done: Some(if send { send_done::<T> } else { recv_done::<T> }),
                }),
                sge: Opaque::new(sys::ib_sge { addr: dma, length: size as u32, lkey }),
                send_wr: Opaque::new(Default::default()),
                recv_wr: Opaque::new(Default::default()),
                data,
                dma,
                index,
            },
            GFP_KERNEL,
        )
        .inspect_err(|_| {
            // SAFETY: mapped just above; nothing else knows the address.
            unsafe { unmap(device, dma, size, send) };
        })?;
        // SAFETY: the box is pinned, so the CQE and SGE addresses are stable
        // for the WRs that point at them.
        unsafe {
            if send {
                let wr = &mut *buf.send_wr.get();
                wr.__bindgen_anon_1.wr_cqe = buf.cqe.get();
                wr.sg_list = buf.sge.get();
                wr.num_sge = 1;
                wr.opcode = sys::ib_wr_opcode_IB_WR_SEND;
                wr.send_flags = sys::ib_send_flags_IB_SEND_SIGNALED as i32;
            } else {
                let wr = &mut *buf.recv_wr.get();
                wr.__bindgen_anon_1.wr_cqe = buf.cqe.get();
                wr.sg_list = buf.sge.get();
                wr.num_sge = 1;
            }
        }
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
        // SAFETY: nothing is moved out of the pinned allocation.
        let inner = unsafe { self.inner.as_mut().get_unchecked_mut() };
        inner.dying.store(true, Ordering::Release);
        if let Some(v) = inner.verbs.take() {
            // SAFETY: each object is released once, in dependency order. The
            // drain makes every posted WR complete, so after it the HCA holds
            // no buffer; freeing a CQ waits for its running handlers.
            unsafe {
                if !v.qp.is_null() {
                    let _ = sys::rdma_disconnect(inner.id);
                    sys::ib_drain_qp(v.qp);
                    sys::rdma_destroy_qp(inner.id);
                }
                if !v.send_cq.is_null() {
                    sys::ib_free_cq(v.send_cq);
                }
                if !v.recv_cq.is_null() {
                    sys::ib_free_cq(v.recv_cq);
                }
                for buf in inner.sends.iter() {
                    unmap(v.device, buf.dma, buf.data.len(), true);
                }
                for buf in inner.recvs.iter() {
                    unmap(v.device, buf.dma, buf.data.len(), false);
                }
                sys::rpcrdma_rs_dealloc_pd(v.pd);
            }
        }
        // SAFETY: created in `new`; this waits for a running event handler,
        // after which none can start.
        unsafe { sys::rdma_destroy_id(inner.id) };
    }
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
    let len = (wc.byte_len as usize).min(buf.data.len());
    // SAFETY: the HCA wrote `len` bytes into this mapped buffer, and the
    // buffer is ours until we repost it below.
    unsafe { sys::rpcrdma_rs_dma_sync_for_cpu(verbs.device, buf.dma, len) };
    let invalidated_rkey = if wc.wc_flags & sys::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int != 0 {
        // SAFETY: `ex` holds the invalidated rkey when the flag is set.
        Some(unsafe { wc.ex.invalidate_rkey })
    } else {
        None
    };
    inner.handler.received(Received { data: buf.data.get(..len).unwrap_or(&[]), invalidated_rkey });
    if inner.dying.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: the buffer is idle again and the QP is valid while completions
    // run; the WR was unlinked after the initial chain.
    let rc = unsafe { sys::rpcrdma_rs_post_recv(verbs.qp, buf.recv_wr.get()) };
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
    inner.free_sends.lock().push(buf.index);
    inner.handler.send_done(Completion::of(wc));
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
