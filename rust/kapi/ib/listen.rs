// SPDX-License-Identifier: GPL-2.0

//! The passive side: an rdma_cm identifier listening for connection
//! requests, and the request itself until it is accepted or refused.

use core::{
    cell::Cell,
    ptr::{self, NonNull},
};

use kernel::{
    error::{code::EINVAL, Result},
    ffi::{c_int, c_void},
    prelude::*,
};

use super::cm::{CmEvent, CmId};
use crate::{
    kapi::{
        cell::RawPin,
        net::{Net, SockAddr},
    },
    sys,
};

/// What a listener does with connection requests.
pub(crate) trait Acceptor: Send + Sync + Sized {
    /// A peer asks to connect with `private_data`. Accept by making a
    /// connection of `req` ([`ConnBox::accept`](super::ConnBox::accept))
    /// before returning; otherwise the request is refused. Runs in the
    /// CM's work context, holding the new id's handler mutex: a connection
    /// accepted here must not be dropped before this returns.
    fn request(&self, req: Incoming<'_>, private_data: &[u8]);
}

/// A connection request being handled: its new rdma_cm id, owned by
/// rdma_cm until a connection adopts it.
///
/// # Invariants
///
/// `id` is the new id of the request whose CONNECT_REQUEST handler is
/// running (and holds its handler mutex) for `'a`; `accepted` is that
/// handler's flag, set only when a connection adopted the id.
pub(crate) struct Incoming<'a> {
    pub(super) id: NonNull<sys::rdma_cm_id>,
    pub(super) accepted: &'a Cell<bool>,
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
    let accepted = Cell::new(false);
    // INVARIANT: a connection request's new id, in its handler.
    acceptor.request(Incoming { id, accepted: &accepted }, pdata);
    // Not adopted: a non-zero return makes rdma_cm reject and destroy it.
    if accepted.get() {
        0
    } else {
        -1
    }
}
