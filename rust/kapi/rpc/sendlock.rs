// SPDX-License-Identifier: GPL-2.0

//! SUNRPC's send lock on a transport (its `XPRT_LOCKED` bit) as proofs:
//! [`SendLocked`] while the current thread holds it, [`ConnectLock`] while
//! the transport's connect worker does, and [`SendLockedCell`], a value
//! only the lock's holder changes and reads without another lock.
//!
//! SUNRPC holds the lock around `send_request` (for the sending task),
//! `close` (its autoclose work is the only caller, and takes the lock
//! first) and `destroy` (`xprt_destroy` waits for the lock and keeps it);
//! a task that calls `connect` holds it and may hand it to the transport
//! ([`Xprt::lock_connect`]).

use core::{cell::UnsafeCell, marker::PhantomData, ptr::NonNull};

use kernel::{new_spinlock, prelude::*, sync::SpinLock};

use super::Xprt;
use crate::sys;

/// Proof that the holder holds the send lock of one transport.
///
/// # Invariants
///
/// The send lock of the transport at `xprt` is held for `'a`, and no other
/// `SendLocked` for that transport exists meanwhile (the trampolines make
/// one per call they are called with the lock for; a [`ConnectLock`] lends
/// one at a time). Not `Send`: it stays with the thread it was made for.
pub(crate) struct SendLocked<'a> {
    xprt: NonNull<sys::rpc_xprt>,
    _life: PhantomData<&'a ()>,
}

impl SendLocked<'_> {
    /// # Safety
    ///
    /// The caller holds the send lock of the transport at `xprt` for the
    /// value's lifetime, and makes no other `SendLocked` for it meanwhile.
    pub(super) unsafe fn new(xprt: NonNull<sys::rpc_xprt>) -> Self {
        // INVARIANT: per the contract.
        SendLocked { xprt, _life: PhantomData }
    }

    /// Whether this proves the send lock of the transport at `xprt` held.
    #[inline]
    pub(super) fn holds(&self, xprt: NonNull<sys::rpc_xprt>) -> bool {
        self.xprt == xprt
    }
}

/// What SUNRPC stores in place of the task holding the send lock while
/// the transport's connect worker has it: the transport's own address,
/// unique to it and the same on both sides of the connect. SUNRPC only
/// compares it.
pub(super) fn connect_cookie(xprt: NonNull<sys::rpc_xprt>) -> *mut core::ffi::c_void {
    xprt.as_ptr().cast()
}

/// The send lock of a transport, handed by the task that held it to the
/// transport ([`Xprt::lock_connect`]), typically for a connect worker.
/// Dropping it gives the lock back to SUNRPC ([`Xprt::connect_finished`]
/// does, after marking the connect done).
///
/// # Invariants
///
/// The send lock of the transport at `xprt` is held with
/// [`connect_cookie`] as its owner until this is dropped; the transport
/// stays valid until then (SUNRPC frees a transport only after
/// `xprt_destroy` took its send lock).
#[must_use = "dropping it gives the send lock back at once"]
pub(crate) struct ConnectLock {
    xprt: NonNull<sys::rpc_xprt>,
}

// SAFETY: SUNRPC knows the lock's owner by the cookie, not by thread: any
// thread may use and release it.
unsafe impl Send for ConnectLock {}

impl ConnectLock {
    /// # Safety
    ///
    /// The send lock of the transport at `xprt` is held with
    /// [`connect_cookie`] as owner, and this is the only `ConnectLock` for it.
    pub(super) unsafe fn new(xprt: NonNull<sys::rpc_xprt>) -> Self {
        // INVARIANT: per the contract.
        ConnectLock { xprt }
    }

    /// Whether this is the send lock of the transport at `xprt`.
    #[inline]
    pub(super) fn holds(&self, xprt: NonNull<sys::rpc_xprt>) -> bool {
        self.xprt == xprt
    }

    /// The proof of the lock, for as long as this is borrowed.
    pub(crate) fn locked(&mut self) -> SendLocked<'_> {
        // SAFETY: the lock is held until `self` is dropped (type invariant),
        // which the borrow prevents for the proof's lifetime; the mutable
        // borrow makes it the only proof lent.
        unsafe { SendLocked::new(self.xprt) }
    }
}

impl Drop for ConnectLock {
    fn drop(&mut self) {
        // SAFETY: a valid transport whose lock is held with this cookie
        // (type invariant).
        unsafe { sys::xprt_unlock_connect(self.xprt.as_ptr(), connect_cookie(self.xprt)) }
    }
}

/// A value only the holder of a transport's send lock changes, under a
/// spinlock as well: the holder reads it with no lock at all
/// ([`SendLockedCell::get`]), anyone else under the spinlock
/// ([`SendLockedCell::with`]).
///
/// # Invariants
///
/// `value` is written only with `lock` held and a [`SendLocked`] for the
/// transport at address `xprt` borrowed mutably.
#[pin_data]
pub(crate) struct SendLockedCell<T> {
    xprt: usize,
    #[pin]
    lock: SpinLock<()>,
    value: UnsafeCell<T>,
}

// SAFETY: readers on several threads share `&T` (`T: Sync`); a writer
// moves values in and out from whichever thread holds the send lock
// (`T: Send`); the invariant keeps writes apart from every read.
unsafe impl<T: Send + Sync> Sync for SendLockedCell<T> {}

impl<T> SendLockedCell<T> {
    /// A cell holding `value`, changed under `xprt`'s send lock.
    pub(crate) fn new(xprt: Xprt<'_>, value: T) -> impl PinInit<Self> {
        let xprt = xprt.as_ptr() as usize;
        pin_init!(SendLockedCell {
            xprt,
            lock <- new_spinlock!((), "rpcrdma_rs:send_locked"),
            value: UnsafeCell::new(value),
        })
    }

    /// The value, for the holder of the send lock; `None` if `locked` is
    /// another transport's.
    #[inline]
    pub(crate) fn get<'a>(&'a self, locked: &'a SendLocked<'_>) -> Option<&'a T> {
        if locked.xprt.as_ptr() as usize != self.xprt {
            return None;
        }
        // SAFETY: writes need a `SendLocked` for this transport borrowed
        // mutably (type invariant), and the only one that exists is
        // `locked` (its invariant), borrowed shared for `'a`: nothing
        // writes `value` during `'a`.
        Some(unsafe { &*self.value.get() })
    }

    /// Runs `f` on the value under the spinlock.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let _guard = self.lock.lock();
        // SAFETY: writes hold the spinlock (type invariant), which we hold.
        f(unsafe { &*self.value.get() })
    }

    /// Puts `value` in the cell and returns what it held (to be dropped
    /// by the caller, outside the spinlock); gives `value` back if
    /// `locked` is another transport's.
    pub(crate) fn replace(&self, locked: &mut SendLocked<'_>, value: T) -> Result<T, T> {
        if locked.xprt.as_ptr() as usize != self.xprt {
            return Err(value);
        }
        let _guard = self.lock.lock();
        // SAFETY: with the spinlock held no `with` reads; with `locked`, the
        // only `SendLocked` for this transport, borrowed mutably, no `get`
        // borrow is live. INVARIANT: written with both.
        Ok(core::mem::replace(unsafe { &mut *self.value.get() }, value))
    }
}
