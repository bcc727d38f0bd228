// SPDX-License-Identifier: GPL-2.0

//! The operations table (`struct rpc_xprt_ops`) built from a
//! [`Transport`], and the trampolines SUNRPC calls.

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{
    error::Result,
    ffi::{self, c_int, c_ulong, c_ushort},
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use super::{FreedBcRqst, FreedRqst, Rqst, RqstStorage, SendLocked, Shell, StatsWriter, Task, Xprt};
use crate::kapi::compat;
use crate::sys;

/// The Rust side of a transport. Methods with a default body are optional:
/// the operations table leaves out what a transport does not implement
/// (`#[vtable]`), so SUNRPC sees the op as absent, not as a stub.
#[vtable]
pub(crate) trait Transport: Send + Sync + Sized {
    /// Give `task` a request slot (or queue it on the backlog).
    fn alloc_slot(&self, xprt: Xprt<'_>, task: &Task<'_>);
    /// Take a request slot back ([`RqstStorage::take_back`]).
    fn free_slot(&self, xprt: Xprt<'_>, rqst: FreedRqst<'_>);
    /// The storage of one of the transport's requests, which keeps its
    /// buffers (`buf_alloc` and `buf_free` go to it; a storage that is not
    /// the request's gets nothing done).
    fn storage<'a>(&'a self, rqst: &Rqst<'_>) -> Option<&'a RqstStorage>;
    /// The task is done with its buffers; release what the transport holds
    /// for the request (its memory registrations) before they go, and
    /// return the request's storage ([`Transport::storage`]'s answer),
    /// which lets go of them next. May sleep.
    fn release_request<'a>(&'a self, xprt: Xprt<'_>, rqst: &Rqst<'_>) -> Option<&'a RqstStorage>;
    /// Start (re)connecting; `task` waits on the pending queue, holding
    /// the send lock, which it may hand over ([`Xprt::lock_connect`]).
    fn connect(this: Lent<'_, Self>, xprt: Xprt<'_>, task: &Task<'_>);
    /// Close the connection (with the send lock).
    fn close(&self, xprt: Xprt<'_>, locked: &mut SendLocked<'_>);
    /// Send a marshalled request (with the send lock); errors are SUNRPC's
    /// (`ENOTCONN`, `EAGAIN`, ...).
    fn send_request(this: Lent<'_, Self>, xprt: Xprt<'_>, rqst: &Rqst<'_>, locked: &mut SendLocked<'_>) -> Result;
    /// Stop everything before the transport is freed (no more callbacks;
    /// with the send lock).
    fn shutdown(&self, xprt: Xprt<'_>, locked: &mut SendLocked<'_>);

    /// A request timed out.
    fn timer(&self, _xprt: Xprt<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Closes a transport whose closer may not hold the send lock: a
    /// server's backchannel, which the server closes as it takes its
    /// connection down (`svc_delete_xprt`). A transport that has this
    /// never has [`Transport::close`] called.
    fn close_unlocked(&self, _xprt: Xprt<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Fault injection: drop the connection.
    fn inject_disconnect(&self, _xprt: Xprt<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Write the `xprt:` line of `/proc/self/mountstats`.
    fn print_stats(&self, _xprt: Xprt<'_>, _out: &mut StatsWriter<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// The backchannel (all three `bc_` methods or none): the callback
    /// service is done with a backchannel request ([`BcRqst::take_back`]).
    /// The transport reference the request held is dropped after this
    /// returns.
    fn bc_free(&self, _rqst: FreedBcRqst<'_>) {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Most bytes of a backward call or reply (under RCU: must not sleep).
    fn bc_maxpayload(&self, _xprt: Xprt<'_>) -> usize {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
    /// Backward requests the transport accepts at once.
    fn bc_num_slots(&self) -> u32 {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
}

/// The transport object as SUNRPC lends it to an operation: a reference,
/// from which [`Lent::arc`] makes an [`ArcBorrow`] when the operation
/// needs to keep the transport (to queue work, say). That costs a few
/// instructions, which most calls never spend.
///
/// # Invariants
///
/// `t` is the `T` inside the `Arc` whose reference the transport's shell
/// holds (from `Arc::into_raw` in `new_xprt`) until `destroy`, after every
/// operation.
pub(crate) struct Lent<'a, T> {
    t: &'a T,
}

impl<T> Clone for Lent<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Lent<'_, T> {}

impl<T> core::ops::Deref for Lent<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.t
    }
}

impl<'a, T> Lent<'a, T> {
    /// # Safety
    ///
    /// `t` is the transport object of a transport made by [`new_xprt`].
    unsafe fn new(t: &'a T) -> Self {
        // INVARIANT: per the contract.
        Lent { t }
    }

    /// The transport as an [`ArcBorrow`], to take a reference of.
    pub(crate) fn arc(self) -> ArcBorrow<'a, T> {
        // SAFETY: `t` is inside an `Arc` that outlives every operation
        // (type invariant), so `'a`.
        unsafe { ArcBorrow::from_raw(core::ptr::from_ref(self.t)) }
    }
}

pub(super) struct OpsTable<T>(PhantomData<T>);

impl<T: Transport> OpsTable<T> {
    /// A backchannel is all of its operations or none.
    const HAS_BC: bool = {
        assert!(
            T::HAS_BC_FREE == T::HAS_BC_MAXPAYLOAD && T::HAS_BC_FREE == T::HAS_BC_NUM_SLOTS,
            "a Transport implements all of bc_free, bc_maxpayload and bc_num_slots, or none"
        );
        T::HAS_BC_FREE
    };

    pub(super) const OPS: sys::rpc_xprt_ops = sys::rpc_xprt_ops {
        set_buffer_size: None,
        reserve_xprt: Some(sys::xprt_reserve_xprt_cong),
        release_xprt: Some(sys::xprt_release_xprt_cong),
        alloc_slot: Some(alloc_slot::<T>),
        free_slot: Some(free_slot::<T>),
        rpcbind: Some(sys::rpcb_getport_async),
        set_port: Some(set_port::<T>),
        connect: Some(connect::<T>),
        get_srcaddr: None,
        get_srcport: None,
        buf_alloc: Some(buf_alloc::<T>),
        buf_free: Some(buf_free::<T>),
        prepare_request: None,
        send_request: Some(send_request::<T>),
        abort_send_request: None,
        wait_for_reply_request: Some(sys::xprt_wait_for_reply_request_def),
        timer: if T::HAS_TIMER { Some(timer::<T>) } else { None },
        release_request: Some(sys::xprt_release_rqst_cong),
        close: if T::HAS_CLOSE_UNLOCKED {
            Some(close_unlocked::<T> as unsafe extern "C" fn(*mut sys::rpc_xprt))
        } else {
            Some(close::<T> as unsafe extern "C" fn(*mut sys::rpc_xprt))
        },
        destroy: Some(destroy::<T>),
        set_connect_timeout: Some(set_connect_timeout::<T>),
        print_stats: if T::HAS_PRINT_STATS { Some(print_stats::<T>) } else { None },
        enable_swap: Some(enable_swap),
        disable_swap: Some(disable_swap),
        inject_disconnect: if T::HAS_INJECT_DISCONNECT { Some(inject_disconnect::<T>) } else { None },
        bc_setup: if Self::HAS_BC { Some(bc_setup) } else { None },
        bc_maxpayload: if Self::HAS_BC { Some(bc_maxpayload::<T>) } else { None },
        bc_num_slots: if Self::HAS_BC { Some(bc_num_slots::<T>) } else { None },
        bc_free_rqst: if Self::HAS_BC { Some(bc_free_rqst::<T>) } else { None },
        bc_destroy: if Self::HAS_BC { Some(bc_destroy) } else { None },
    };
}

/// # Safety
///
/// SUNRPC calls every operation below with a transport made by [`new_xprt`]
/// for `T`, valid for the call; task and request pointers are valid too.
unsafe extern "C" fn connect<T: Transport>(xprt: *mut sys::rpc_xprt, task: *mut sys::rpc_task) {
    // SAFETY: see the contract above.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(task) else { return };
    // SAFETY: `t` is the transport object of a transport of ours.
    let this = unsafe { Lent::new(t) };
    T::connect(this, x, &Task { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn alloc_slot<T: Transport>(xprt: *mut sys::rpc_xprt, task: *mut sys::rpc_task) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(task) else { return };
    t.alloc_slot(x, &Task { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn free_slot<T: Transport>(xprt: *mut sys::rpc_xprt, rqst: *mut sys::rpc_rqst) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(rqst) else { return };
    // INVARIANT: SUNRPC passes the request it gives back.
    t.free_slot(x, FreedRqst { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`]; `task` has a request on this transport.
unsafe extern "C" fn buf_alloc<T: Transport>(task: *mut sys::rpc_task) -> c_int {
    let Some(traw) = NonNull::new(task) else { return -(sys::EINVAL as c_int) };
    // SAFETY: see `connect`; the task's request belongs to its transport.
    let (rqst, xprt) = unsafe {
        let rqst = (*task).tk_rqstp;
        let Some(raw) = NonNull::new(rqst) else { return -(sys::EINVAL as c_int) };
        (raw, (*rqst).rq_xprt)
    };
    // SAFETY: see `connect`.
    let (_, t) = unsafe { Xprt::transport::<T>(xprt) };
    let r = Rqst { raw: rqst, _life: PhantomData };
    let task = Task { raw: traw, _life: PhantomData };
    // The storage checks that the request is its own.
    match t.storage(&r).map(|s| s.provide_buffers(&task, &r)) {
        Some(Ok(())) => 0,
        Some(Err(e)) => e.to_errno(),
        None => -(sys::EINVAL as c_int),
    }
}

/// # Safety
///
/// See [`connect`]; `task` has a request on this transport.
unsafe extern "C" fn buf_free<T: Transport>(task: *mut sys::rpc_task) {
    // SAFETY: see `connect`; the task's request belongs to its transport.
    let (rqst, xprt) = unsafe {
        let rqst = (*task).tk_rqstp;
        let Some(raw) = NonNull::new(rqst) else { return };
        (raw, (*rqst).rq_xprt)
    };
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let r = Rqst { raw: rqst, _life: PhantomData };
    // What the storage made for the request goes back to it: the storage
    // checks that the request is its own.
    if let Some(s) = t.release_request(x, &r) {
        s.free_buffers(&r);
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn close<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    // SAFETY: SUNRPC's one caller, its autoclose work, holds the send lock
    // for the call (it took it before queueing the work); this is the
    // call's only proof of it. (The server's `svc_delete_xprt` closes a
    // backchannel transport without it: those have `close_unlocked`.)
    let mut locked = unsafe { SendLocked::new(x.raw) };
    t.close(x, &mut locked);
}

/// # Safety
///
/// See [`connect`]; the caller may or may not hold the send lock.
unsafe extern "C" fn close_unlocked<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.close_unlocked(x);
}

/// # Safety
///
/// See [`connect`]. After this returns, SUNRPC never uses `xprt` again.
unsafe extern "C" fn destroy<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    {
        // SAFETY: `xprt_destroy` took the send lock, and keeps it, before
        // it had this called; this is the call's only proof of it, gone
        // before the transport is.
        let mut locked = unsafe { SendLocked::new(x.raw) };
        t.shutdown(x, &mut locked);
    }
    // SAFETY: `transport` came from `Arc::into_raw` in `new_xprt`: the
    // shell's reference, given up here.
    let t = unsafe { Arc::from_raw((*xprt.cast::<Shell>()).transport.cast::<T>()) };
    // After `shutdown` nothing else may hold the transport (its queued work
    // was cancelled): it goes now, before the memory it points into.
    if Arc::into_unique_or_drop(t).is_none() {
        // Someone still holds it and will drop it later: keep the rpc_xprt
        // (and the module) rather than free memory it may still read.
        pr_err!("transport still referenced after shutdown: leaking it\n");
        return;
    }
    // Nor may anything it shared with others still name the memory.
    if !super::xprt::no_refs(x.raw) {
        pr_err!("transport memory still referenced after shutdown: leaking it\n");
        return;
    }
    x.free_addresses();
    // SAFETY: SUNRPC hands the transport over for freeing; the module
    // reference taken in `new_xprt` is dropped last.
    unsafe {
        sys::xprt_free(xprt);
        sys::module_put(compat::this_module().as_ptr().cast());
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn send_request<T: Transport>(rqst: *mut sys::rpc_rqst) -> c_int {
    // SAFETY: see `connect`; a request being sent has its transport set.
    let (x, t) = unsafe { Xprt::transport::<T>((*rqst).rq_xprt) };
    let Some(raw) = NonNull::new(rqst) else { return -(sys::EINVAL as c_int) };
    // SAFETY: see `connect`.
    let this = unsafe { Lent::new(t) };
    // SAFETY: SUNRPC sends with the send lock held by the sending task
    // (`xprt_transmit`), for the call; this is the call's only proof of it.
    let mut locked = unsafe { SendLocked::new(x.raw) };
    match T::send_request(this, x, &Rqst { raw, _life: PhantomData }, &mut locked) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn timer<T: Transport>(xprt: *mut sys::rpc_xprt, _task: *mut sys::rpc_task) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.timer(x);
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn set_port<T: Transport>(xprt: *mut sys::rpc_xprt, port: c_ushort) {
    // SAFETY: see `connect`.
    let (x, _) = unsafe { Xprt::transport::<T>(xprt) };
    x.set_port(port);
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn set_connect_timeout<T: Transport>(xprt: *mut sys::rpc_xprt, connect: c_ulong, reconnect: c_ulong) {
    // SAFETY: see `connect`. SUNRPC calls this without a lock
    // (`rpc_xprt_set_connect_timeout`); the helper takes the transport's
    // `transport_lock`, as the in-tree transports do to change these.
    unsafe { sys::rpcrdma_rs_set_connect_timeout(xprt, connect, reconnect) };
}

/// # Safety
///
/// See [`connect`]; `seq` is valid for the call.
unsafe extern "C" fn print_stats<T: Transport>(xprt: *mut sys::rpc_xprt, seq: *mut sys::seq_file) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(seq) = NonNull::new(seq) else { return };
    t.print_stats(x, &mut StatsWriter { seq, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn inject_disconnect<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.inject_disconnect(x);
}

/// The backchannel requests exist from transport creation on; nothing to set
/// up.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn bc_setup(_xprt: *mut sys::rpc_xprt, _min_reqs: ffi::c_uint) -> c_int {
    0
}

/// # Safety
///
/// See [`connect`]. Runs under RCU.
unsafe extern "C" fn bc_maxpayload<T: Transport>(xprt: *mut sys::rpc_xprt) -> usize {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.bc_maxpayload(x)
}

/// # Safety
///
/// See [`connect`]. Runs under RCU.
unsafe extern "C" fn bc_num_slots<T: Transport>(xprt: *mut sys::rpc_xprt) -> ffi::c_uint {
    // SAFETY: see `connect`.
    let (_, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.bc_num_slots()
}

/// # Safety
///
/// Called by SUNRPC with a backchannel request this transport delivered.
unsafe extern "C" fn bc_free_rqst<T: Transport>(rqst: *mut sys::rpc_rqst) {
    let Some(raw) = NonNull::new(rqst) else { return };
    // SAFETY: the request's transport is one of ours: `deliver` took a
    // reference on it, held until the end of this function.
    let (xprt, t) = unsafe {
        let xprt = (*rqst).rq_xprt;
        (xprt, Xprt::transport::<T>(xprt).1)
    };
    // INVARIANT: SUNRPC passes the request it gives back.
    t.bc_free(FreedBcRqst { raw, _life: PhantomData });
    // SAFETY: drops the reference `deliver` took, once. Nothing of the
    // transport is touched afterwards: this may free it.
    unsafe { sys::xprt_put(xprt) };
}

/// Backchannel requests live as long as the transport; nothing to free here.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn bc_destroy(_xprt: *mut sys::rpc_xprt, _max_reqs: ffi::c_uint) {}

/// Swap over NFS/RDMA needs nothing special from the transport.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn enable_swap(_xprt: *mut sys::rpc_xprt) -> c_int {
    0
}

/// See [`enable_swap`].
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn disable_swap(_xprt: *mut sys::rpc_xprt) {}
