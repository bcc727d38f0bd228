// SPDX-License-Identifier: GPL-2.0

//! Who may reach what: the identities of connections ([`ConnHandle`]) and
//! of the memory that tokens name ([`Lender`]), the tokens a registration
//! and a Send give ([`Registration`], [`InFlight`]), and the proof that a
//! lender's memory is out of the device's and the peer's reach again
//! ([`Released`]).
//!
//! A lender is one piece of memory the connection's tokens may name: an
//! RPC request's buffers, say. At most one token of a lender exists at a
//! time: [`Conn::begin`](super::Conn::begin) mints it (the lender is then
//! away), and only the operation that ends it (invalidating its regions
//! and waiting for its Send, on its own connection, or learning that its
//! connection is gone) gives the lender back and mints the [`Released`]
//! proof for it. A lender that no token holds gives its proof itself
//! ([`Lender::released_idle`]): that is true, not a shortcut, since it is
//! the only place a token can come from. Forgetting a token leaks: the
//! lender stays away (its request can never be completed), and every page
//! the token's regions and Send name keeps the reference they took.
//!
//! Identities are numbers this module hands out, one after the other,
//! never twice: nobody can pass one in, and a token of a connection that
//! is gone never matches a later one.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel::{
    alloc::flags::GFP_KERNEL,
    error::{code::EBUSY, Result},
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use crate::kapi::cell::LeaseCell;

/// The identities handed out so far. The one static of kapi: an identity
/// must be unique across every owner, which a counter an owner keeps (and
/// could make twice) cannot promise.
static IDS: AtomicU64 = AtomicU64::new(1);

/// A new identity, never handed out before (a 64-bit count does not wrap).
pub(super) fn new_id() -> u64 {
    IDS.fetch_add(1, Ordering::Relaxed)
}

/// The identity of one connection: held by the connection, and by each
/// lender whose token names it, so that a token can be released once its
/// connection is gone ([`Lender::release_dead`]).
///
/// # Invariants
///
/// `id` is unique ([`new_id`]). `gone` is set, once, only after the
/// connection's queue pair was destroyed and its memory regions and
/// buffers freed (each dropping the page references it held): then no
/// token of the connection names anything the device can reach.
#[pin_data]
pub(crate) struct ConnHandle {
    id: u64,
    gone: AtomicBool,
    #[pin]
    lock: SpinLock<()>,
    #[pin]
    gone_wait: CondVar,
}

impl ConnHandle {
    /// A new identity.
    pub(super) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(ConnHandle {
                id: new_id(),
                gone: AtomicBool::new(false),
                lock <- new_spinlock!((), "rpcrdma_rs:conn_handle"),
                gone_wait <- new_condvar!("rpcrdma_rs:conn_gone"),
            }),
            GFP_KERNEL,
        )
    }

    /// The connection's number.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// True once the connection is gone (see the type invariant).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The connection is gone: called by its teardown, after the queue
    /// pair, memory regions and buffers.
    pub(super) fn set_gone(&self) {
        let g = self.lock.lock();
        // INVARIANT: the caller is the connection's teardown, past the
        // point the invariant names.
        self.gone.store(true, Ordering::Release);
        drop(g);
        self.gone_wait.notify_all();
    }

    /// Waits until the connection is gone. Sleeps; never returns for a
    /// connection its owner keeps.
    pub(crate) fn wait_gone(&self) {
        let mut g = self.lock.lock();
        while !self.gone.load(Ordering::Acquire) {
            self.gone_wait.wait(&mut g);
        }
    }
}

/// Memory that tokens may name: the identity of an RPC request's buffers
/// (in its slot), or of any memory of an owner's. One token at a time:
/// away while a [`Registration`] or [`InFlight`] of it exists, idle
/// otherwise. The connection of its last token is kept, for
/// [`Lender::release_dead`].
///
/// # Invariants
///
/// `id` is unique ([`new_id`]). `cell` is away exactly while one token
/// with `lender == id` exists, which owns that hand-off: only consuming
/// the token gives it back; or while a [`Closed`] of it exists, which
/// owns it then (and no token exists). Its value is the handle of the connection the
/// token was minted on (kept after, until a token of another connection
/// replaces it).
pub(crate) struct Lender {
    id: u64,
    cell: LeaseCell<Option<Arc<ConnHandle>>>,
}

impl Lender {
    /// A lender that no token holds.
    pub(crate) fn new() -> Self {
        // INVARIANT: a new identity, no token.
        Lender { id: new_id(), cell: LeaseCell::new(None) }
    }

    /// The lender's identity, the owner tag of the pages it lends.
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Takes the lender for a token of the connection `conn`: fails with
    /// `EBUSY` if a token of it exists. The caller makes that token.
    #[inline]
    pub(super) fn lend(&self, conn: &Arc<ConnHandle>) -> Result {
        let mut l = self.cell.lease().ok_or(EBUSY)?;
        // The usual token is of the same connection as the last one.
        if l.as_ref().map(|h| h.id) != Some(conn.id) {
            *l = Some(conn.clone());
        }
        // INVARIANT: away, for the token the caller makes now.
        l.hand_off();
        Ok(())
    }

    /// Gives the lender back, idle, as its token is consumed on its
    /// connection after the work that ends it.
    ///
    /// # Safety
    ///
    /// The caller consumes the lender's token (`lender == self.id`),
    /// which owns its hand-off (type invariant), and the token's regions
    /// and Send no longer let the device or the peer touch the lender's
    /// memory.
    #[inline]
    pub(super) unsafe fn give_back(&self) -> Released {
        // SAFETY: per the contract; the connection handle stays as it is.
        unsafe { self.cell.give_back() };
        // INVARIANT: the token is consumed: idle, no token.
        Released { lender: self.id }
    }

    /// The proof for a lender no token holds: nothing it lends is mapped
    /// or registered. `None` if a token exists.
    #[inline]
    pub(crate) fn released_idle(&self) -> Option<Released> {
        self.cell.is_idle().then_some(Released { lender: self.id })
    }

    /// Releases `t`, a token of this lender, if its connection is gone
    /// (its queue pair destroyed, its regions and buffers freed): nothing
    /// of the lender is in the device's reach. Hands it back otherwise.
    pub(crate) fn release_dead(&self, t: InFlight) -> core::result::Result<Released, InFlight> {
        if t.lender != self.id {
            return Err(t);
        }
        self.void_if_gone(t.conn).map_err(|()| t)
    }

    /// Waits until the connection of `t`, a token of this lender, is gone,
    /// then releases it ([`Lender::release_dead`]). Sleeps. Hands back a
    /// token of another lender.
    pub(crate) fn wait_dead(&self, t: InFlight) -> core::result::Result<Released, InFlight> {
        if t.lender != self.id {
            return Err(t);
        }
        // SAFETY: `t` is the lender's token, which owns the hand-off
        // (type invariant); it is handed off again below.
        let Some(l) = (unsafe { self.cell.take_back() }) else { return Err(t) };
        let handle = l.as_ref().filter(|h| h.id == t.conn).cloned();
        l.hand_off();
        let Some(handle) = handle else { return Err(t) };
        handle.wait_gone();
        self.release_dead(t)
    }

    /// Gives the lender back if the connection `conn` of its token (whose
    /// caller consumes it) is gone.
    fn void_if_gone(&self, conn: u64) -> core::result::Result<Released, ()> {
        // SAFETY: the caller holds the lender's token (its `lender` is
        // this one's), which owns the hand-off (type invariant).
        let l = unsafe { self.cell.take_back() }.ok_or(())?;
        if l.as_ref().is_some_and(|h| h.id == conn && h.is_gone()) {
            // INVARIANT: the token is consumed; its connection is gone, so
            // nothing it named is in the device's reach (invariant of
            // `ConnHandle`).
            drop(l);
            return Ok(Released { lender: self.id });
        }
        // Still the token's.
        l.hand_off();
        Err(())
    }
}

impl Lender {
    /// Closes the lender, idle as `proof` shows: no token of it can be
    /// made ([`Conn::begin`](super::Conn::begin) fails with `EBUSY`) until
    /// the returned value is dropped, so that what the proof says stays
    /// true meanwhile (an RPC request is completed under it). The proof
    /// back if it is another lender's, or if a token was made since.
    #[inline]
    pub(crate) fn close(&self, proof: Released) -> core::result::Result<Closed<'_>, Released> {
        if proof.lender != self.id {
            return Err(proof);
        }
        self.close_idle().ok_or(proof)
    }

    /// Closes the lender if no token of it exists (see [`Lender::close`]).
    #[inline]
    pub(crate) fn close_idle(&self) -> Option<Closed<'_>> {
        let l = self.cell.lease()?;
        // INVARIANT: away, for the `Closed` made now (no token exists: the
        // lease was granted).
        l.hand_off();
        Some(Closed { lender: self })
    }

    /// Closes the lender as its token is consumed on its connection after
    /// the work that ends it: the token's hand-off passes to the returned
    /// value, the lender never idle in between.
    ///
    /// # Safety
    ///
    /// As for [`Lender::give_back`].
    #[inline]
    pub(super) unsafe fn close_consumed(&self) -> Closed<'_> {
        // INVARIANT: the hand-off was the token's, which the caller
        // consumes (the contract); it is this value's now.
        Closed { lender: self }
    }
}

/// A lender kept idle ([`Lender::close`]): no token of it exists, nor can
/// be made, until this is dropped.
///
/// # Invariants
///
/// `lender.cell` is away, handed off to this value.
pub(crate) struct Closed<'a> {
    lender: &'a Lender,
}

impl Closed<'_> {
    /// The lender it keeps closed.
    #[inline]
    pub(crate) fn lender(&self) -> u64 {
        self.lender.id
    }
}

impl Drop for Closed<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the hand-off is this value's (type invariant), ended
        // once, here; the value stays as it was.
        unsafe { self.lender.cell.give_back() };
    }
}

impl Default for Lender {
    fn default() -> Self {
        Self::new()
    }
}

/// Memory regions registered for one lender on one connection whose
/// REG_MR work requests are not posted yet. [`Conn::begin`] makes it
/// (holding no region), [`Conn::register`] adds to it; the Send that
/// advertises the regions consumes it ([`Conn::send`]) and returns the
/// [`InFlight`]; a call that is not sent gives the regions back with
/// [`Conn::release_unposted`]. Its regions form a list through the
/// regions themselves (each names the next), so the token is a few words,
/// whatever it holds.
///
/// [`Conn::begin`]: super::Conn::begin
/// [`Conn::register`]: super::Conn::register
/// [`Conn::send`]: super::Conn::send
/// [`Conn::release_unposted`]: super::Conn::release_unposted
///
/// # Invariants
///
/// The token of lender `lender` (see [`Lender`]) on the connection `conn`.
/// It holds `count` regions of that connection, each handed off to it by
/// `Conn::register`, mapped and not posted, listed from `head` through
/// each region's `next`; only consuming the token takes them back. Not
/// `Clone`; only kapi makes one.
#[must_use = "an unposted registration holds mapped memory regions: send or release it"]
pub(crate) struct Registration {
    pub(super) lender: u64,
    pub(super) conn: u64,
    pub(super) head: u16,
    pub(super) count: u16,
}

/// The end of a token's list of regions.
pub(super) const NO_MR: u16 = u16::MAX;

/// No R/W operation (a Send buffer's `carried_rw`).
pub(super) const NO_RW: u16 = u16::MAX;

/// What a lender has in the device's or the peer's reach after a Send:
/// the memory regions it advertised (the peer may read or write them
/// until they are invalidated) and, if the Send mapped pages of the
/// lender, the Send (the device may still read them until it completes).
/// [`Conn::release`] consumes it and returns the [`Released`] proof.
///
/// [`Conn::release`]: super::Conn::release
///
/// # Invariants
///
/// As for [`Registration`], except that the regions' REG_MRs were posted
/// (or the queue pair went to the error state trying), and `seq` is the
/// number of the Send on its connection, which reads pages of the lender
/// it mapped in place if `mapped`.
#[must_use = "the peer can reach these regions until they are invalidated"]
pub(crate) struct InFlight {
    pub(super) lender: u64,
    pub(super) conn: u64,
    pub(super) head: u16,
    pub(super) count: u16,
    pub(super) mapped: bool,
    pub(super) seq: u64,
}

impl InFlight {
    /// Memory regions held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// The connection it was made on.
    #[inline]
    pub(crate) fn conn_id(&self) -> u64 {
        self.conn
    }
}

/// Proof that nothing of one lender's memory is in the device's or the
/// peer's reach: its token's regions are invalidated (or were never
/// posted, or their connection is gone) and its Send no longer reads it.
/// Made only by the operations that achieve that for that lender's token,
/// and by [`Lender::released_idle`] for a lender no token holds. An RPC
/// request is completed only with its own
/// ([`RqstStorage::released`](crate::kapi::rpc::RqstStorage::released)).
///
/// # Invariants
///
/// When it was made, lender `lender` had no token and nothing of its
/// memory was in reach.
pub(crate) struct Released {
    pub(super) lender: u64,
}


/// A Send that failed: why, and the registration it did not post, to
/// give back ([`Conn::release_unposted`](super::Conn::release_unposted)).
/// If its REG_MRs reached the queue pair only in part, those regions are
/// kept out of use until the connection goes, and releasing the token
/// moves the queue pair to the error state first (it sleeps then: hold no
/// spinlock).
pub(crate) struct SendFailed {
    /// Why.
    pub(crate) err: kernel::error::Error,
    /// The token, as it was before the Send.
    pub(crate) reg: Registration,
}

/// How a release went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Invalidation {
    /// Regions that needed a LOCAL_INV.
    pub(crate) local: usize,
    /// The LOCAL_INV could not be posted on a live connection: its queue
    /// pair is in the error state now, and the connection must be dropped.
    pub(crate) post_failed: bool,
}

impl Invalidation {
    /// Nothing posted: no region needed a LOCAL_INV.
    pub(super) const NONE: Self = Invalidation { local: 0, post_failed: false };
}
