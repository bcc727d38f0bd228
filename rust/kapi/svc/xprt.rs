// SPDX-License-Identifier: GPL-2.0

//! A server transport (`struct svc_xprt`) embedded in the Rust object that
//! implements it ([`SvcXprt`]), and the arguments for making one
//! ([`NewXprt`]).
//!
//! The core reaches a transport only through its `svc_xprt`, from the
//! moment it is handed over (`xpo_create` or `xpo_accept` returns it) until
//! its reference count drops to zero and `xpo_free` runs. The owner lives
//! in an `Arc`, one reference of which the core holds over that time: the
//! `svc_xprt`'s memory outlasts every use the core makes of it, and the
//! owner's own references (a connection's completion handlers, say) keep
//! it after.
//!
//! A transport may attach one value to its `svc_xprt` ([`SvcXprt::attach`],
//! a connection, say): the core's calls borrow it without a lock or a
//! reference count of their own, as the core holds the transport for each
//! call, and `xpo_free` hands it back to the owner.

use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering},
};

use kernel::{prelude::*, sync::Arc, types::Opaque};

use crate::{kapi::net::SockAddr, sys};

/// What a server transport is, for the core: an object that embeds an
/// [`SvcXprt`] and says where it is.
pub(crate) trait SvcXprtOwner: Send + Sync + Sized + 'static {
    /// What the transport attaches to its `svc_xprt` ([`SvcXprt::attach`]).
    type Attached: Send + Sync + 'static;

    /// The embedded transport, a field of `self` (one elsewhere is
    /// refused when the transport is handed over).
    fn svc_xprt(&self) -> &SvcXprt<Self>;
}

/// The `xpt_flags` bits a transport signals work with. Their numbers are
/// the same on every supported kernel line (`enum` in
/// `<linux/sunrpc/svc_xprt.h>`; helpers.c checks them at build time). The
/// bits the core owns (`XPT_BUSY`, `XPT_DEAD`, ...) are not among them:
/// setting one at the wrong time derails the core's own teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum XptFlag {
    /// A connection waits to be accepted (on a listener).
    Conn = 1,
    /// Data waits to be received.
    Data = 3,
}

/// `XPT_CLOSE`: the transport is to be closed (set, never cleared, by the
/// transport or the core).
const XPT_CLOSE: u32 = 2;

/// `XPT_DEAD`: the core took the transport down (its own bit).
const XPT_DEAD: u32 = 5;

/// No value attached.
const EMPTY: u8 = 0;
/// The value is being attached, by the one thread that left `EMPTY`.
const WRITING: u8 = 1;
/// A value is attached, shared.
const SET: u8 = 2;
/// The value was taken back.
const TAKEN: u8 = 3;

/// A `struct svc_xprt` embedded in its owner `T`.
///
/// # Invariants
///
/// `raw` is the first field (`repr(C)`) and was initialised by
/// `svc_xprt_init` with the class of `T` (which takes a reference of the
/// network namespace for the core), and holds a reference of that
/// namespace of its own until it is dropped. `owner` is null until the transport is handed to
/// the core ([`hand_over`]); from then on it is the `T` the `SvcXprt` lies
/// in, one reference of whose `Arc` the core owns until `xpo_free` gives
/// it back ([`take_back`]), which sets `released`.
///
/// `attached` is `None` in states `EMPTY` and `TAKEN` of `state`, written
/// only by the thread that moved `state` from `EMPTY` to `WRITING`, and
/// `Some` from `SET` on, when it is only read, until the one taking it
/// back moves `state` on to `TAKEN` (with no reader left: see
/// [`SvcXprt::take_attached`]).
#[pin_data(PinnedDrop)]
#[repr(C)]
pub(crate) struct SvcXprt<T: SvcXprtOwner> {
    #[pin]
    raw: Opaque<sys::svc_xprt>,
    owner: AtomicPtr<T>,
    released: AtomicBool,
    attached: UnsafeCell<Option<T::Attached>>,
    state: AtomicU8,
    _owner: PhantomData<T>,
}

// SAFETY: the core serialises what it does to the `svc_xprt` under its own
// rules (atomic flag bits, its locks, its reference count); the owner is
// `Send + Sync`, and no method hands out the C data. The attached value
// (`Send + Sync`) is shared only once written, and moved out by one
// thread (type invariant).
unsafe impl<T: SvcXprtOwner> Send for SvcXprt<T> {}
// SAFETY: see `Send`.
unsafe impl<T: SvcXprtOwner> Sync for SvcXprt<T> {}

/// What a [`NewXprt`] borrows (the core's call) and makes (a `T`).
type NewXprtLife<'a, T> = (&'a sys::svc_serv, fn() -> T);

/// What the core gives for a new transport: its class, its server and its
/// network namespace (a listener's for a connection it accepts).
///
/// # Invariants
///
/// `class` is the registered class of `T`, `serv` and `net` are live for
/// `'a` (the `xpo_create` or `xpo_accept` call).
pub(crate) struct NewXprt<'a, T> {
    pub(super) class: *mut sys::svc_xprt_class,
    pub(super) serv: *mut sys::svc_serv,
    pub(super) net: *mut sys::net,
    pub(super) _life: PhantomData<NewXprtLife<'a, T>>,
}

impl<'a, T: SvcXprtOwner> NewXprt<'a, T> {
    /// The transport, initialised where it is placed (while the core's
    /// call lasts): a listener bound to `local`, or a connection between
    /// `local` and `remote`. Fails with `EAFNOSUPPORT` for an address that
    /// is not IPv4 or IPv6.
    pub(crate) fn xprt<'b>(
        &'b self,
        local: &'b SockAddr,
        remote: Option<&'b SockAddr>,
    ) -> Result<impl PinInit<SvcXprt<T>> + 'b> {
        if !local.is_inet() || remote.is_some_and(|r| !r.is_inet()) {
            return Err(crate::kapi::errno::EAFNOSUPPORT());
        }
        let (class, serv, net) = (self.class, self.serv, self.net);
        // The initialiser borrows `self`: it cannot outlive the call whose
        // server and namespace it names.
        let life: PhantomData<&'b Self> = PhantomData;
        Ok(pin_init!(SvcXprt {
            // SAFETY: `slot` is valid for writes and pinned; `net`, `class`
            // and `serv` are live while `self` is borrowed (type invariant
            // of `NewXprt`, and `life`), and the addresses IPv4 or IPv6
            // (checked above). The helper runs `svc_xprt_init` (which
            // takes a reference of `net` for the core), takes one of its
            // own, and writes the addresses into the new transport, which
            // nobody else reaches yet; a listener (no `remote`) is marked
            // so. `Drop` gives back what the core did not.
            raw <- Opaque::ffi_init(move |slot| unsafe {
                let _ = life;
                sys::rpcrdma_rs_svc_xprt_init(
                    net,
                    class,
                    slot,
                    serv,
                    local.as_ptr(),
                    remote.map_or(ptr::null(), |r| r.as_ptr()),
                )
            }),
            owner: AtomicPtr::new(ptr::null_mut()),
            released: AtomicBool::new(false),
            attached: UnsafeCell::new(None),
            state: AtomicU8::new(EMPTY),
            _owner: PhantomData,
        }))
    }
}

impl<T: SvcXprtOwner> SvcXprt<T> {
    fn as_ptr(&self) -> *mut sys::svc_xprt {
        self.raw.get()
    }

    /// Sets `flag`.
    pub(crate) fn set_flag(&self, flag: XptFlag) {
        // SAFETY: the transport is initialised (type invariant); the bit
        // is one a transport sets, atomically, as the core does.
        unsafe { sys::rpcrdma_rs_svc_xprt_set_flag(self.as_ptr(), flag as u32) };
    }

    /// Clears `flag`.
    pub(crate) fn clear_flag(&self, flag: XptFlag) {
        // SAFETY: as in `set_flag`.
        unsafe { sys::rpcrdma_rs_svc_xprt_clear_flag(self.as_ptr(), flag as u32) };
    }

    /// The peer's address as text (a listener's: "listener"), for trace
    /// events and messages.
    pub(crate) fn peer_text(&self) -> crate::kapi::rpc::AddrText {
        crate::kapi::rpc::AddrText::filled(|b| {
            // SAFETY: initialised (type invariant): the text was written
            // when the transport was made, before anyone could read it;
            // the helper writes at most `b.len()` bytes, NUL included.
            unsafe { sys::rpcrdma_rs_svc_xprt_peer_copy(self.as_ptr(), b.as_mut_ptr().cast(), b.len()) }
        })
    }

    /// True once the core took the transport down (`XPT_DEAD`): it is
    /// being, or was, deleted.
    pub(crate) fn is_dead(&self) -> bool {
        // SAFETY: initialised (type invariant); the bit is read
        // atomically, as the core reads it.
        unsafe { sys::rpcrdma_rs_svc_xprt_test_flag(self.as_ptr(), XPT_DEAD) }
    }

    /// Attaches `a` to the transport, for the core's calls to borrow
    /// ([`SvcTransport`](super::SvcTransport)'s `recvfrom`, `sendto` and
    /// `detach` get it) until `xpo_free` gives it back to the owner (its
    /// `free`); or, if the core never took the transport, until the
    /// transport goes (an owner that the value refers to is then never
    /// freed: attach when the transport is about to be handed over). `a`
    /// back if a value was attached already, or the core gave the
    /// transport back.
    pub(crate) fn attach(&self, a: T::Attached) -> core::result::Result<(), T::Attached> {
        if self.released.load(Ordering::Acquire)
            || self.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return Err(a);
        }
        // SAFETY: this thread moved the state from `EMPTY` to `WRITING`:
        // nobody else reads or writes the value (type invariant).
        unsafe { *self.attached.get() = Some(a) };
        // INVARIANT: written; shared from now on.
        self.state.store(SET, Ordering::Release);
        Ok(())
    }

    /// The attached value, if one is, borrowed for `'a`.
    ///
    /// # Safety
    ///
    /// Nobody calls [`SvcXprt::take_attached`] before `'a` ends: `'a` lies
    /// in a core call on the handed-over transport, which the core holds
    /// (so `xpo_free` waits for its end).
    unsafe fn attached<'a>(&'a self) -> Option<&'a T::Attached> {
        if self.state.load(Ordering::Acquire) != SET {
            return None;
        }
        // SAFETY: set, so only read until it is taken back (type
        // invariant), which waits for `'a` to end (the contract).
        unsafe { (*self.attached.get()).as_ref() }
    }

    /// The attached value, taken back, if one is.
    ///
    /// # Safety
    ///
    /// No borrow made by [`SvcXprt::attached`] lives: the core gave the
    /// transport back (`xpo_free`), or never held it.
    unsafe fn take_attached(&self) -> Option<T::Attached> {
        if self.state.compare_exchange(SET, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return None;
        }
        // SAFETY: this thread moved the state from `SET` to `TAKEN`, and
        // no borrow lives (the contract): the value is this thread's.
        unsafe { (*self.attached.get()).take() }
    }

    /// True while the core holds the transport: handed over, and
    /// `xpo_free` has not given it back.
    fn core_holds(&self) -> bool {
        !self.owner.load(Ordering::Acquire).is_null() && !self.released.load(Ordering::Acquire)
    }

    /// Sets `flag` and has a thread look at the transport (the only way
    /// work reaches a thread: set the flag, then enqueue). See
    /// [`SvcXprt::enqueue`].
    pub(crate) fn signal(&self, flag: XptFlag) {
        self.set_flag(flag);
        self.enqueue();
    }

    /// Asks the core to close the transport, from any context: a thread
    /// takes it down. Asked before the transport is handed over, the core
    /// closes it once it takes it.
    pub(crate) fn close_later(&self) {
        // SAFETY: initialised (type invariant); `XPT_CLOSE` is set, never
        // cleared, by transports and the core alike.
        unsafe { sys::rpcrdma_rs_svc_xprt_set_flag(self.as_ptr(), XPT_CLOSE) };
        self.enqueue();
    }

    /// Has a thread look at the transport's flags: nothing before the
    /// transport is handed over (the core looks at them when it takes it)
    /// nor once `xpo_free` gave it back. In between the core may be
    /// freeing its part concurrently: the memory stays (`self` is
    /// borrowed) and so does the namespace the core's trace event reads
    /// (the transport's own reference); a transport the core took down
    /// stays busy for ever, so the core never queues it again.
    fn enqueue(&self) {
        if !self.core_holds() {
            return;
        }
        // SAFETY: see above: initialised, known to the core, its memory
        // and namespace live.
        unsafe { sys::svc_xprt_enqueue(self.as_ptr()) };
    }
}

/// Hands `this` over to the core: returns the `svc_xprt` to give it, the
/// core owning one reference of the `Arc` from now on. `this` back if its
/// transport does not lie in it, is of another class, or was handed over
/// already (the caller tears it down).
pub(super) fn hand_over<T: SvcXprtOwner>(
    this: Arc<T>,
    class: *mut sys::svc_xprt_class,
) -> core::result::Result<NonNull<sys::svc_xprt>, Arc<T>> {
    // The accessor is asked once: the field checked is the one recorded.
    let x = this.svc_xprt();
    let (base, at) = (ptr::from_ref(&*this) as usize, ptr::from_ref(x) as usize);
    let inside = base.checked_add(core::mem::size_of::<T>()).is_some_and(|end| {
        at >= base && at.checked_add(core::mem::size_of::<SvcXprt<T>>()).is_some_and(|x_end| x_end <= end)
    });
    let raw = x.as_ptr();
    // SAFETY: initialised (type invariant); one field read.
    if !inside || unsafe { (*raw).xpt_class } != class {
        return Err(this);
    }
    let offset = at - base;
    let owner = Arc::into_raw(this).cast_mut();
    // SAFETY: `owner` came from `Arc::into_raw` just above (the same
    // object: `x` lies `offset` bytes into it), and holds a `SvcXprt<T>`
    // there.
    let x = unsafe { &*owner.cast::<u8>().add(offset).cast::<SvcXprt<T>>() };
    if x.owner.compare_exchange(ptr::null_mut(), owner, Ordering::AcqRel, Ordering::Acquire).is_err() {
        // SAFETY: the reference leaked above, taken back once: the
        // transport stays its earlier owner's.
        return Err(unsafe { Arc::from_raw(owner) });
    }
    // INVARIANT: the core owns the reference leaked above until `xpo_free`.
    NonNull::new(raw).ok_or_else(|| {
        // Never: a field's address. SAFETY: the reference leaked above.
        unsafe { Arc::from_raw(owner) }
    })
}

/// The owner of the transport `raw`, borrowed for the core's call.
///
/// # Safety
///
/// `raw` is the `svc_xprt` of a handed-over [`SvcXprt<T>`] whose core
/// reference is not given back before `'a` ends (the core holds the
/// transport for the call).
pub(super) unsafe fn owner_of<'a, T: SvcXprtOwner>(raw: *mut sys::svc_xprt) -> Option<&'a T> {
    // SAFETY: per the contract, `raw` is the first field of a `repr(C)`
    // `SvcXprt<T>`, which is therefore at the same address.
    let x = unsafe { &*raw.cast::<SvcXprt<T>>() };
    let owner = x.owner.load(Ordering::Acquire);
    if owner.is_null() || x.released.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: handed over and not given back: the owner is live while the
    // core holds its reference (type invariant of `SvcXprt`).
    Some(unsafe { &*owner })
}

/// What the transport `raw` attached, borrowed for the core's call.
///
/// # Safety
///
/// As for [`owner_of`].
pub(super) unsafe fn attached_of<'a, T: SvcXprtOwner>(raw: *mut sys::svc_xprt) -> Option<&'a T::Attached> {
    // SAFETY: per the contract, `raw` is the first field of a `repr(C)`
    // `SvcXprt<T>`, which is therefore at the same address.
    let x = unsafe { &*raw.cast::<SvcXprt<T>>() };
    // SAFETY: the core holds the transport until `'a` ends (the
    // contract): `xpo_free` does not take the value back meanwhile.
    unsafe { x.attached() }
}

/// Gives the core's reference of the owner of `raw` back (`xpo_free`),
/// with what the transport attached.
///
/// # Safety
///
/// As for [`owner_of`]; the core calls this once, last.
pub(super) unsafe fn take_back<T: SvcXprtOwner>(raw: *mut sys::svc_xprt) -> Option<(Arc<T>, Option<T::Attached>)> {
    // SAFETY: per the contract.
    let x = unsafe { &*raw.cast::<SvcXprt<T>>() };
    let owner = x.owner.load(Ordering::Acquire);
    if owner.is_null() || x.released.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: the core's reference (type invariant), given back once (the
    // flag just set).
    let t = unsafe { Arc::from_raw(owner) };
    // SAFETY: the core dropped its last reference: none of its calls runs,
    // or will.
    let a = unsafe { x.take_attached() };
    Some((t, a))
}

#[pinned_drop]
impl<T: SvcXprtOwner> PinnedDrop for SvcXprt<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: the transport goes: nobody borrows anything of it.
        drop(unsafe { self.take_attached() });
        // Handed over, the core gave its namespace reference back in
        // `svc_xprt_free`, before `xpo_free` let go of the owner.
        let core_done = !self.owner.load(Ordering::Acquire).is_null();
        // SAFETY: initialised (type invariant) and reached by nobody now;
        // the transport's own namespace reference goes back once, and the
        // core's too if the core never took the transport.
        unsafe { sys::rpcrdma_rs_svc_xprt_uninit(self.raw.get(), !core_done) };
    }
}
