// SPDX-License-Identifier: GPL-2.0

//! The passive side: an rdma_cm identifier listening for connection
//! requests ([`Listener`]), and a request until it is accepted or refused
//! ([`ConnRequest`]), which its acceptor may keep and accept later, from a
//! thread of its own (as svcrdma accepts from an nfsd thread, not from the
//! CM's handler).

use core::{
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox},
    error::{code::EINVAL, Result},
    ffi::{c_int, c_void},
    prelude::*,
};

use super::{
    cm::{CmEvent, CmId},
    device::{Device, DeviceCaps},
};
use crate::{
    kapi::{
        cell::RawPin,
        net::{Net, SockAddr},
    },
    sys,
};

/// What a listener does with connection requests.
pub(crate) trait Acceptor: Send + Sync + Sized {
    /// A peer asks to connect. `req` is the acceptor's: it may accept it
    /// ([`ConnBox::accept`](super::ConnBox::accept)) at once, or keep it
    /// and accept it later from another thread; dropping it refuses it.
    /// Runs in the CM's work context.
    fn request(&self, req: ConnRequest);
}

/// Most bytes of a request's private data (rdma_cm's limit for a REQ).
const MAX_PRIVATE_DATA: usize = 256;

/// What the CM tells about a request before it is accepted, kept where its
/// handler finds it.
///
/// # Invariants
///
/// `handler_task` is the task running the listener's handler for the
/// request while it runs (null otherwise).
struct Pending {
    /// The request's connection went away before it was accepted (device
    /// removal, a rejection).
    gone: AtomicBool,
    /// Dropped in the listener's handler: the handler refuses it.
    refused: AtomicBool,
    handler_task: AtomicPtr<c_void>,
    private_data: [u8; MAX_PRIVATE_DATA],
    private_len: usize,
    /// RDMA Reads the peer lets us have in flight (its responder
    /// resources, as the CM reports them to the passive side).
    initiator_depth: u8,
    /// The request's addresses: ours (where it arrived) and the peer's.
    local: sys::__kernel_sockaddr_storage,
    remote: sys::__kernel_sockaddr_storage,
}

/// A connection request: its rdma_cm id, owned by whoever has this value
/// until a connection adopts the id ([`ConnRequest::adopt`]); dropped, the
/// request is refused and its id destroyed.
///
/// # Invariants
///
/// `id` is a request's new id whose events go to `pending_handler` with
/// `pending` as context (set in the listener's handler, under the id's
/// handler mutex), and which nobody else destroys; `pending` is a box of
/// this value's, freed only after the id is destroyed or has another
/// handler.
pub(crate) struct ConnRequest {
    id: NonNull<sys::rdma_cm_id>,
    pending: NonNull<Pending>,
}

// SAFETY: the id is the request's alone (type invariant), and rdma_cm
// serialises what is done to it under its handler mutex; `Pending` is
// atomics and data written once before the request is handed out.
unsafe impl Send for ConnRequest {}
// SAFETY: see `Send`; `&ConnRequest` only reads.
unsafe impl Sync for ConnRequest {}

impl ConnRequest {
    /// Where the request arrived (our address), and where it came from
    /// (the peer's).
    pub(crate) fn addrs(&self) -> (&SockAddr, &SockAddr) {
        // SAFETY: `pending` is live (type invariant); these fields are
        // written once, before the request is handed out, and each holds
        // the socket address rdma_cm gave the request.
        let p = unsafe { self.pending.as_ref() };
        // SAFETY: as above: live for the borrow of `self`.
        unsafe { (SockAddr::from_raw(&p.local), SockAddr::from_raw(&p.remote)) }
    }

    /// The capabilities of the device the request arrived on.
    pub(crate) fn device_caps(&self) -> Result<DeviceCaps> {
        // SAFETY: the id is live and the request's (type invariant); a
        // request's id is bound to the device it arrived on, which stays
        // registered while the id holds it.
        let device = unsafe { (*self.id.as_ptr()).device };
        if device.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: as above, for the borrow of `self`.
        Ok(unsafe { Device::from_raw(device) }.caps())
    }

    /// How many RDMA Reads the peer lets this side have in flight on the
    /// connection (its responder resources): at most what to accept with
    /// as our initiator depth.
    pub(crate) fn initiator_depth(&self) -> u8 {
        // SAFETY: `pending` is live (type invariant); the field is written
        // once, before the request is handed out.
        unsafe { self.pending.as_ref() }.initiator_depth
    }

    /// The peer's private data.
    pub(crate) fn private_data(&self) -> &[u8] {
        // SAFETY: `pending` is live (type invariant); these fields are
        // written once, before the request is handed out.
        let p = unsafe { self.pending.as_ref() };
        p.private_data.get(..p.private_len).unwrap_or(&[])
    }

    /// Takes over the request's id for a connection, with `handler` and
    /// `context` for its events from now on, and runs `setup` under the
    /// id's handler mutex (as rdma_cm wants `rdma_accept` called): `setup`
    /// takes the id out of the slot it is given (to keep it) and creates
    /// the queue pair and accepts; on failure it puts the id back. Fails
    /// with `EDEADLK` when called from the listener's handler for this
    /// same request (which holds that mutex: accept after it returns),
    /// and with `ENOTCONN` when the request went away meanwhile. On
    /// failure the request comes back, still the caller's to accept or
    /// drop, unless `setup` kept the id (then it is `setup`'s, and the
    /// request is over).
    ///
    /// # Safety
    ///
    /// `context` stays valid for `handler` until the id is destroyed.
    pub(super) unsafe fn adopt(
        self,
        handler: super::cm::CmHandlerFn,
        context: *mut c_void,
        setup: impl FnOnce(&mut Option<CmId>) -> Result,
    ) -> core::result::Result<(), (kernel::error::Error, Option<Self>)> {
        // SAFETY: `pending` is live (type invariant).
        let p = unsafe { self.pending.as_ref() };
        // SAFETY: reading the current task's address.
        let me = unsafe { sys::rpcrdma_rs_current_task() };
        if p.handler_task.load(Ordering::Acquire) == me {
            return Err((crate::kapi::errno::EDEADLK(), Some(self)));
        }
        let id = self.id.as_ptr();
        // SAFETY: the id is live and ours (type invariant); its handler
        // mutex orders this with any event of it.
        unsafe { sys::rdma_lock_handler(id) };
        if p.gone.load(Ordering::Acquire) {
            // SAFETY: locked just above.
            unsafe { sys::rdma_unlock_handler(id) };
            return Err((crate::kapi::errno::ENOTCONN(), Some(self)));
        }
        // SAFETY: with the handler mutex held no event of the id reads the
        // fields; `context` per the contract.
        let mut slot = Some(unsafe { CmId::adopt(self.id, handler, context) });
        let made = setup(&mut slot);
        match (made, slot.take()) {
            (Err(e), Some(cm)) => {
                // Back to the pending handler: the request stays the
                // caller's.
                // SAFETY: as above; `pending` is live.
                unsafe {
                    sys::rpcrdma_rs_cm_id_set_handler(id, Some(pending_handler), self.pending.as_ptr().cast());
                    sys::rdma_unlock_handler(id);
                }
                core::mem::forget(cm);
                Err((e, Some(self)))
            }
            (made, left) => {
                // SAFETY: locked above.
                unsafe { sys::rdma_unlock_handler(id) };
                // An id `setup` did not keep is destroyed (after the
                // unlock: destroying takes the mutex).
                drop(left);
                // The id's handler is no longer the pending one: nothing
                // reaches the box.
                // SAFETY: freed once.
                drop(unsafe { KBox::from_raw(self.pending.as_ptr()) });
                core::mem::forget(self);
                made.map_err(|e| (e, None))
            }
        }
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        // SAFETY: `pending` is live (type invariant).
        let p = unsafe { self.pending.as_ref() };
        // SAFETY: reading the current task's address.
        if p.handler_task.load(Ordering::Acquire) == unsafe { sys::rpcrdma_rs_current_task() } {
            // In the listener's handler for this request, which holds the
            // id's handler mutex: destroying the id here would wait for
            // it for ever. The handler refuses it (rdma_cm then destroys
            // the id) and frees the box.
            p.refused.store(true, Ordering::Release);
            return;
        }
        // SAFETY: the id is ours (type invariant): refused, then destroyed
        // (which waits for a running handler; none starts after). The box
        // goes after, when nothing can reach it.
        unsafe {
            sys::rdma_reject(self.id.as_ptr(), ptr::null(), 0, 0);
            sys::rdma_destroy_id(self.id.as_ptr());
            drop(KBox::from_raw(self.pending.as_ptr()));
        }
    }
}

/// The handler of a request's id before it is accepted: notes that it went
/// away.
///
/// # Safety
///
/// Called by rdma_cm for an id a [`ConnRequest`] owns, whose context is its
/// `Pending`.
unsafe extern "C" fn pending_handler(id: *mut sys::rdma_cm_id, event: *mut sys::rdma_cm_event) -> c_int {
    // SAFETY: per the contract; the id and event are valid for the call.
    let (p, ev) = unsafe { (&*(*id).context.cast::<Pending>(), &*event) };
    // SAFETY: `ev` is this running handler's event.
    match unsafe { CmEvent::decode(ev) } {
        CmEvent::DeviceRemoval
        | CmEvent::Disconnected
        | CmEvent::Rejected(..)
        | CmEvent::ConnectError(_)
        | CmEvent::Unreachable(_) => p.gone.store(true, Ordering::Release),
        _ => {}
    }
    // Never destroyed by rdma_cm: its `ConnRequest` does that.
    0
}

#[pin_data]
struct Inner<A: Acceptor> {
    #[pin]
    acceptor: A,
    id: Option<CmId>,
}

/// A listening rdma_cm id; stops listening on drop (which waits for a
/// running request handler).
///
/// # Invariants
///
/// `inner`'s id is `Some` from `new`'s return until `Drop`, and its context
/// is `inner`'s `acceptor`; only `new` and `Drop` write the `id` field.
pub(crate) struct Listener<A: Acceptor> {
    inner: RawPin<Inner<A>>,
}

impl<A: Acceptor> Listener<A> {
    /// Listens on `addr` in `net`; requests go to `acceptor`.
    pub(crate) fn new(net: &Net, addr: &SockAddr, backlog: u32, acceptor: impl PinInit<A>) -> Result<Self> {
        let inner = RawPin::new(pin_init!(Inner { acceptor <- acceptor, id: None }))?;
        let raw = inner.as_ptr();
        let this = Listener { inner };
        // SAFETY: `raw` is live; only the field's address is taken.
        let ctx = unsafe { ptr::addr_of!((*raw).acceptor) }.cast_mut().cast::<c_void>();
        // SAFETY: the acceptor outlives the id (`Drop` destroys the id
        // first).
        let id = unsafe { CmId::new(net, listen_handler::<A>, ctx) }?;
        // SAFETY: no event arrives before `listen` and the handler reaches
        // only `acceptor`; nothing else reads the field yet.
        unsafe { (*raw).id = Some(id) };
        // INVARIANT: the id is set, with the acceptor as its context.
        this.inner.id.as_ref().ok_or(EINVAL)?.listen(addr, backlog)?;
        Ok(this)
    }

    /// The acceptor given to [`Listener::new`].
    pub(crate) fn acceptor(&self) -> &A {
        &self.inner.acceptor
    }
}

impl<A: Acceptor> Drop for Listener<A> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`, and the handler reaches only `acceptor`: the
        // field is ours. Destroying the id waits for a running handler;
        // `inner` is freed after.
        drop(unsafe { (*self.inner.as_ptr()).id.take() });
    }
}

/// The listener's rdma_cm event handler: its own events, and connection
/// requests (with the new id).
///
/// # Safety
///
/// Called by rdma_cm for a listener made by [`Listener::new`] (context: its
/// acceptor), or for a request's new id, which inherited that context.
unsafe extern "C" fn listen_handler<A: Acceptor>(id: *mut sys::rdma_cm_id, event: *mut sys::rdma_cm_event) -> c_int {
    // SAFETY: per the contract; the id and event are valid for the call.
    let (acceptor, ev) = unsafe { (&*(*id).context.cast::<A>(), &*event) };
    // SAFETY: `ev` is this running handler's event.
    let CmEvent::ConnectRequest(pdata) = (unsafe { CmEvent::decode(ev) }) else { return 0 };
    let Some(id) = NonNull::new(id) else { return 0 };
    let mut pending = Pending {
        gone: AtomicBool::new(false),
        refused: AtomicBool::new(false),
        // SAFETY: reading the current task's address.
        handler_task: AtomicPtr::new(unsafe { sys::rpcrdma_rs_current_task() }),
        private_data: [0; MAX_PRIVATE_DATA],
        private_len: pdata.len().min(MAX_PRIVATE_DATA),
        // SAFETY: a CONNECT_REQUEST of a connected (RC) service carries
        // its parameters in the `conn` member, plain data valid for the
        // handler.
        initiator_depth: unsafe { ev.param.conn.initiator_depth },
        // SAFETY: the request's id is live for the handler; rdma_cm set
        // its route's addresses before the CONNECT_REQUEST event.
        local: unsafe { (*id.as_ptr()).route.addr.src_addr },
        // SAFETY: as above.
        remote: unsafe { (*id.as_ptr()).route.addr.dst_addr },
    };
    if let Some(d) = pending.private_data.get_mut(..pending.private_len) {
        d.copy_from_slice(pdata.get(..d.len()).unwrap_or(&[]));
    }
    // Refused (non-zero: rdma_cm destroys the id) when there is no memory
    // to keep the request.
    let Ok(b) = KBox::new(pending, GFP_KERNEL) else { return -1 };
    let pending = NonNull::from(KBox::leak(b));
    // SAFETY: the request's id, in its CONNECT_REQUEST handler, which holds
    // its handler mutex: nothing reads these fields meanwhile. The box
    // outlives the handler (the request frees it).
    unsafe { sys::rpcrdma_rs_cm_id_set_handler(id.as_ptr(), Some(pending_handler), pending.as_ptr().cast()) };
    // INVARIANT: the id's events go to the pending handler; the request is
    // the acceptor's from now on.
    acceptor.request(ConnRequest { id, pending });
    // The box is live until the request is dropped or accepted elsewhere,
    // neither of which can complete while this handler holds the id's
    // handler mutex (accepting waits for it, dropping destroys the id,
    // which waits for the handler); dropped here, it was left for us.
    // SAFETY: see above.
    let p = unsafe { pending.as_ref() };
    if p.refused.load(Ordering::Acquire) {
        // SAFETY: the request was dropped in this handler (so nothing else
        // holds it); the id goes back to rdma_cm with the non-zero return,
        // which refuses and destroys it. Freed once.
        drop(unsafe { KBox::from_raw(pending.as_ptr()) });
        return -1;
    }
    // INVARIANT: no longer in the handler.
    p.handler_task.store(ptr::null_mut(), Ordering::Release);
    0
}
