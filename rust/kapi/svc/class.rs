// SPDX-License-Identifier: GPL-2.0

//! Server transport classes (`struct svc_xprt_class`) and the operations
//! the core calls on their transports (`struct svc_xprt_ops`).
//!
//! A [`SvcClassRegistration`] makes an [`SvcTransport`] known to the core
//! under its name, so that `echo "rdma 20049" > /proc/fs/nfsd/portlist`
//! reaches [`SvcTransport::create`]; dropping it unregisters the class.
//! A class of the same name registered first (the in-tree `rpcrdma`'s) is
//! an error, never silently shadowed.

use core::{marker::PhantomData, ptr};

use kernel::{
    error::{to_result, Result},
    ffi::{c_int, c_uint, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
    ThisModule,
};

use super::{
    rqst::{PayloadRqst, RecvRqst, SendRqst},
    xprt::{attached_of, hand_over, owner_of, take_back, NewXprt, SvcXprtOwner},
};
use crate::{
    kapi::{
        net::{Net, SockAddr},
        slot::{Claim, ClassSlot, SlotRef},
    },
    sys,
};

/// A server-side RPC transport implementation: one type for the class's
/// listeners and its connections (the core calls the same operations on
/// both).
pub(crate) trait SvcTransport: SvcXprtOwner {
    /// The class's name (what `portlist` takes).
    const NAME: &'static CStr;
    /// The `XPRT_TRANSPORT_*` identifier (the backchannel's class is found
    /// by it).
    const IDENT: u32;
    /// Most bytes of an RPC's payload the class carries.
    const MAX_PAYLOAD: u32;
    /// Where the registered class is kept (see [`SvcClassSlot`]).
    const SLOT: SvcClassSlotRef;

    /// What `recvfrom` keeps of a call for its `sendto`
    /// ([`RecvRqst::set_ctxt`], [`SendRqst::ctxt`]); freed by the core's
    /// `xpo_release_ctxt` once the thread is done with the call.
    type CallCtxt: Send + 'static;

    /// A listener on `addr` in `net` (`xpo_create`). Process context; may
    /// sleep.
    fn create(new: NewXprt<'_, Self>, net: &Net, addr: &SockAddr) -> Result<Arc<Self>>;

    /// One connection waiting on this listener, or `None`
    /// (`xpo_accept`): on a server thread, the listener busy meanwhile.
    fn accept(&self, new: NewXprt<'_, Self>) -> Option<Arc<Self>>;

    /// True if a reply could be sent now (`xpo_has_wspace`). Must not
    /// block: the core asks from completion handlers too.
    fn has_wspace(&self) -> bool;

    /// Gives the thread `rq` one call, if there is one
    /// ([`RecvRqst::set_call`]; `xpo_recvfrom`). On a server thread, the
    /// transport busy meanwhile. `attached` is what the transport
    /// attached ([`SvcXprt::attach`](super::SvcXprt::attach)), if it did,
    /// here and in `sendto` and `detach`.
    fn recvfrom(&self, attached: Option<&Self::Attached>, rq: &mut RecvRqst<'_, Self::CallCtxt>);

    /// The upper layer placed a result payload (a READ's data) of
    /// `length` bytes at `offset` in the reply it is encoding
    /// (`xpo_result_payload`): where a Write chunk's data lies. On the
    /// request's thread, between `recvfrom` and `sendto`. An error fails
    /// the encoding (`E2BIG`: larger than the chunk offered for it).
    fn result_payload(rq: &mut PayloadRqst<'_, Self::CallCtxt>, offset: u32, length: u32) -> Result;

    /// Sends the reply of `rq` (`xpo_sendto`); may sleep, and runs on
    /// several threads at once. The reply's memory is the thread's again
    /// when this returns.
    fn sendto(&self, attached: Option<&Self::Attached>, rq: &SendRqst<'_, Self::CallCtxt>) -> Result<u32>;

    /// The core took the transport down (`xpo_detach`): stop taking work.
    fn detach(&self, attached: Option<&Self::Attached>);

    /// The core let go of the transport (`xpo_free`), after which its
    /// reference goes, and gave back what the transport attached: the
    /// owner's to drop. May sleep. Nothing calls the other operations
    /// again. Also called, with `None`, for a transport the core never
    /// took.
    fn free(&self, attached: Option<Self::Attached>);

    /// The core is done with a call's context (`xpo_release_ctxt`): the
    /// thread finished the call, or a deferred call was dropped. On a
    /// server thread; may be called after [`SvcTransport::detach`]. The
    /// transport may keep `ctxt` for a later call; by default it is
    /// dropped.
    fn release_ctxt(&self, ctxt: KBox<Self::CallCtxt>) {
        drop(ctxt);
    }
}

/// Where a class is kept, in module memory: the `svc_xprt_class` the core
/// registers, which its transports point at (`xpt_class`). The class's
/// implementation owns one, as a `static` ([`SvcTransport::SLOT`]), made
/// by the first registration and kept as long as the module (a transport
/// of the class holds a module reference).
pub(crate) type SvcClassSlot = ClassSlot<sys::svc_xprt_class>;

/// A `&'static` [`SvcClassSlot`], in a form a constant may hold.
pub(crate) type SvcClassSlotRef = SlotRef<sys::svc_xprt_class>;

/// A registered server transport class; unregistered on drop.
///
/// # Invariants
///
/// The class of `claim` is `T`'s, registered with the core (by `new`)
/// until `drop` unregisters it.
pub(crate) struct SvcClassRegistration<T: SvcTransport> {
    claim: Claim<sys::svc_xprt_class>,
    _class: PhantomData<T>,
}

impl<T: SvcTransport> SvcClassRegistration<T> {
    /// Registers `T` with the core; `module` (this module) is held by the
    /// core for each of the class's transports. Fails with `EEXIST` if a
    /// class of the same name is registered (the in-tree `rpcrdma`'s), and
    /// with `EBUSY` if `T` is, or its slot holds another class.
    pub(crate) fn new(module: &'static ThisModule) -> Result<Self> {
        let claim = T::SLOT.get().claim::<T>(|| Self::class(module))?;
        // SAFETY: the class is made (its name is `'static`, its ops a
        // promoted constant) and lives as long as the module; the claim
        // is ours, so nobody else registers it. The core refuses a name
        // it has.
        if let Err(e) = to_result(unsafe { sys::svc_reg_xprt_class(claim.raw()) }) {
            // SAFETY: not registered; the claim goes with this call.
            unsafe { claim.end() };
            return Err(e);
        }
        // INVARIANT: registered above.
        Ok(Self { claim, _class: PhantomData })
    }

    /// `T`'s class.
    fn class(module: &'static ThisModule) -> sys::svc_xprt_class {
        // SAFETY: `svc_xprt_class` is plain C data (a list head, integers
        // and pointers); all zeroes is a valid value. `svc_reg_xprt_class`
        // initialises the list head.
        let mut class: sys::svc_xprt_class = unsafe { core::mem::zeroed() };
        class.xcl_name = crate::kapi::compat::cstr_ptr(T::NAME);
        class.xcl_owner = module.as_ptr().cast();
        class.xcl_ops = Ops::<T>::table();
        class.xcl_max_payload = T::MAX_PAYLOAD;
        class.xcl_ident = T::IDENT as c_int;
        class
    }
}

impl<T: SvcTransport> Drop for SvcClassRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: registered by `new` (type invariant); the core takes it
        // off its list under its lock. Transports of the class keep
        // pointing at module memory that stays.
        unsafe { sys::svc_unreg_xprt_class(self.claim.raw()) };
        // SAFETY: unregistered just above; the claim goes with `self`.
        unsafe { self.claim.end() };
    }
}

/// The operations table of `T`'s class: a constant, promoted to a static
/// the class points at.
struct Ops<T>(PhantomData<T>);

impl<T: SvcTransport> Ops<T> {
    const TABLE: sys::svc_xprt_ops = sys::svc_xprt_ops {
        xpo_create: Some(create::<T>),
        xpo_accept: Some(accept::<T>),
        xpo_has_wspace: Some(has_wspace::<T>),
        xpo_recvfrom: Some(recvfrom::<T>),
        xpo_sendto: Some(sendto::<T>),
        xpo_result_payload: Some(result_payload::<T>),
        xpo_release_ctxt: Some(release_ctxt::<T>),
        xpo_detach: Some(detach::<T>),
        xpo_free: Some(free::<T>),
        xpo_kill_temp_xprt: Some(kill_temp_xprt),
        xpo_handshake: None,
    };

    /// The table, as the `'static` its constant is promoted to (a compile
    /// error, never a temporary's address, if it stops being promotable).
    const fn table() -> &'static sys::svc_xprt_ops {
        &Self::TABLE
    }
}

/// Gives `t`, a new transport, to the core: its `svc_xprt`, or null (and
/// `t` torn down) if it cannot be handed over.
fn give<T: SvcTransport>(t: Arc<T>) -> *mut sys::svc_xprt {
    match hand_over(t, class_of::<T>()) {
        Ok(p) => p.as_ptr(),
        Err(t) => {
            pr_err!("server transport not handed over: its svc_xprt is not its own\n");
            // What it attached goes with the transport.
            t.free(None);
            ptr::null_mut()
        }
    }
}

/// The class of `T`, once registered.
fn class_of<T: SvcTransport>() -> *mut sys::svc_xprt_class {
    T::SLOT.get().raw()
}

/// The transport `raw` as a counted reference of its owner, if it is a
/// transport of `T`'s class the core holds: what a backchannel made for
/// it keeps ([`new_bc_xprt`](crate::kapi::rpc::new_bc_xprt)).
///
/// # Safety
///
/// `raw` is a live `svc_xprt` of which the caller holds a reference (the
/// core's `svc_xprt_get`) for the call.
pub(in crate::kapi) unsafe fn owner_arc<T: SvcTransport>(raw: *mut sys::svc_xprt) -> Option<Arc<T>> {
    // SAFETY: live (the contract); one field read, which the core set
    // when the transport was made and never changes.
    if unsafe { (*raw).xpt_class } != class_of::<T>() {
        return None;
    }
    // SAFETY: a transport of `T`'s class is one made by `NewXprt::xprt`,
    // an `SvcXprt<T>`; the caller's reference keeps the core's, so
    // `xpo_free` does not give the owner back during the call.
    let t = unsafe { owner_of::<T>(raw) }?;
    // SAFETY: the owner lies in the `Arc` the core holds one reference
    // of (type invariant of `SvcXprt`), live for the call.
    let b = unsafe { kernel::sync::ArcBorrow::from_raw(ptr::from_ref(t)) };
    Some(b.into())
}

/// # Safety
///
/// Called by the core for a class of `T` (`_svc_xprt_create`): `serv` and
/// `net` are live for the call, `sa` a socket address of `salen` bytes.
unsafe extern "C" fn create<T: SvcTransport>(
    serv: *mut sys::svc_serv,
    net: *mut sys::net,
    sa: *mut sys::sockaddr,
    salen: c_int,
    _flags: c_int,
) -> *mut sys::svc_xprt {
    let min = core::mem::size_of::<sys::sockaddr_in>() as c_int;
    if sa.is_null() || salen < min || salen as usize > core::mem::size_of::<sys::__kernel_sockaddr_storage>() {
        return EINVAL.to_ptr();
    }
    // A copy of the address in storage of its own: the core's may be
    // shorter than a `sockaddr_storage`.
    let mut buf = sys::__kernel_sockaddr_storage::default();
    // SAFETY: `sa` is readable for `salen` bytes (the contract), which fit
    // in `buf` (checked above).
    unsafe { ptr::copy_nonoverlapping(sa.cast::<u8>(), ptr::addr_of_mut!(buf).cast::<u8>(), salen as usize) };
    // SAFETY: `buf` holds a socket address and outlives the call; `net` is
    // live for it (the contract).
    let (addr, net_ref) = unsafe { (SockAddr::from_raw(&buf), Net::from_raw(net)) };
    // INVARIANT: the class is `T`'s, registered; `serv` and `net` live for
    // the call.
    let new = NewXprt { class: class_of::<T>(), serv, net, _life: PhantomData };
    match T::create(new, net_ref, addr).map(give) {
        Ok(p) if !p.is_null() => p,
        Ok(_) => EINVAL.to_ptr(),
        Err(e) => e.to_ptr(),
    }
}

/// # Safety
///
/// Called by the core with a listener of `T`'s class, which it holds for
/// the call.
unsafe extern "C" fn accept<T: SvcTransport>(xprt: *mut sys::svc_xprt) -> *mut sys::svc_xprt {
    // SAFETY: per the contract.
    let Some(t) = (unsafe { owner_of::<T>(xprt) }) else { return ptr::null_mut() };
    // SAFETY: the listener is live for the call (the contract); its server
    // and namespace outlive it.
    let (serv, net) = unsafe { ((*xprt).xpt_server, (*xprt).xpt_net) };
    // INVARIANT: as in `create`.
    let new = NewXprt { class: class_of::<T>(), serv, net, _life: PhantomData };
    t.accept(new).map_or(ptr::null_mut(), give)
}

/// # Safety
///
/// Called by the core with a transport of `T`'s class it holds.
unsafe extern "C" fn has_wspace<T: SvcTransport>(xprt: *mut sys::svc_xprt) -> c_int {
    // SAFETY: per the contract.
    unsafe { owner_of::<T>(xprt) }.is_some_and(|t| t.has_wspace()) as c_int
}

/// # Safety
///
/// Called by the core on a server thread with `rqstp`, whose transport
/// (`rq_xprt`, of `T`'s class) it holds.
unsafe extern "C" fn recvfrom<T: SvcTransport>(rqstp: *mut sys::svc_rqst) -> c_int {
    // SAFETY: the thread's request, for this call (the contract), whose
    // context only this class's `recvfrom` sets and only its
    // `release_ctxt` frees. Made first: whatever happens, `finish` lets the
    // transport go.
    let mut rq = unsafe { RecvRqst::<T::CallCtxt>::begin(rqstp) };
    // SAFETY: per the contract.
    let xprt = unsafe { (*rqstp).rq_xprt };
    // SAFETY: as above.
    if let Some(t) = unsafe { owner_of::<T>(xprt) } {
        // SAFETY: as for `owner_of`: the core holds the transport until
        // the call returns.
        let a = unsafe { attached_of::<T>(xprt) };
        t.recvfrom(a, &mut rq);
    }
    rq.finish()
}

/// # Safety
///
/// As for [`recvfrom`], from `svc_send`.
unsafe extern "C" fn sendto<T: SvcTransport>(rqstp: *mut sys::svc_rqst) -> c_int {
    // SAFETY: per the contract.
    let xprt = unsafe { (*rqstp).rq_xprt };
    // SAFETY: as above.
    let Some(t) = (unsafe { owner_of::<T>(xprt) }) else { return -(sys::ENOTCONN as c_int) };
    // SAFETY: the thread's request, for this call (the contract); its
    // context, if any, is the one this class's `recvfrom` set for the call.
    let rq = unsafe { SendRqst::<T::CallCtxt>::new(rqstp) };
    // SAFETY: as for `owner_of`.
    let a = unsafe { attached_of::<T>(xprt) };
    match t.sendto(a, &rq) {
        Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        Err(e) => e.to_errno(),
    }
}

/// `xpo_result_payload`: the upper layer says where a result payload lies
/// in the reply it encodes.
///
/// # Safety
///
/// Called by the core on a server thread with `rqstp`, whose transport
/// (`rq_xprt`, of `T`'s class) it holds, while the thread encodes the
/// reply of the call this class's `recvfrom` gave it.
unsafe extern "C" fn result_payload<T: SvcTransport>(rqstp: *mut sys::svc_rqst, offset: c_uint, length: c_uint) -> c_int {
    // SAFETY: the thread's request, for this call (the contract); its
    // context, if any, is the one this class's `recvfrom` set for the call.
    let mut rq = unsafe { PayloadRqst::<T::CallCtxt>::new(rqstp) };
    match T::result_payload(&mut rq, offset, length) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `xpo_release_ctxt`: gives a call's context back to its transport (or
/// frees it), once the core is done with the call (or drops a deferred
/// one).
///
/// # Safety
///
/// Called by the core with a transport of `T`'s class it holds and the
/// `rq_xprt_ctxt` of one of its requests (or of a request deferred from
/// one), which is null or what [`RecvRqst::set_ctxt`] stored there for
/// this class; once for each.
unsafe extern "C" fn release_ctxt<T: SvcTransport>(xprt: *mut sys::svc_xprt, ctxt: *mut c_void) {
    // SAFETY: per the contract.
    let Some(c) = (unsafe { super::rqst::take_ctxt::<T::CallCtxt>(ctxt) }) else { return };
    // SAFETY: per the contract (the thread's request holds the transport;
    // a deferred request holds its own reference, and the core's own
    // outlives the deferred requests it drops while deleting it).
    match unsafe { owner_of::<T>(xprt) } {
        Some(t) => t.release_ctxt(c),
        None => drop(c),
    }
}

/// # Safety
///
/// Called by the core with a transport of `T`'s class it holds.
unsafe extern "C" fn detach<T: SvcTransport>(xprt: *mut sys::svc_xprt) {
    // SAFETY: per the contract.
    if let Some(t) = unsafe { owner_of::<T>(xprt) } {
        // SAFETY: as for `owner_of`.
        let a = unsafe { attached_of::<T>(xprt) };
        t.detach(a);
    }
}

/// # Safety
///
/// Called by the core once, last, with a transport of `T`'s class whose
/// last reference it dropped.
unsafe extern "C" fn free<T: SvcTransport>(xprt: *mut sys::svc_xprt) {
    // SAFETY: per the contract: the core's reference comes back here.
    if let Some((t, a)) = unsafe { take_back::<T>(xprt) } {
        t.free(a);
        drop(t);
    }
}

/// `xpo_kill_temp_xprt`: must exist; nothing to do (the core closes the
/// transport itself).
///
/// # Safety
///
/// None beyond the core's call: nothing is dereferenced.
unsafe extern "C" fn kill_temp_xprt(_xprt: *mut sys::svc_xprt) {}
