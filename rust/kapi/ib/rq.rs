// SPDX-License-Identifier: GPL-2.0

//! The Receive queue of a connection: posting Receive buffers, the
//! completion handler that hands what arrived to the owner, and Receives
//! an owner keeps after its handler returns ([`HeldRecv`]). When a
//! consumed buffer is posted again is the owner's: it is told that the
//! buffer is idle ([`Events::recv_idle`]), in the Receive CQ's handler,
//! with the state it keeps there.

use core::{cell::Cell, ptr, sync::atomic::Ordering};

use kernel::{error::Result, ffi::c_int};

use super::{
    buf::{BufState, DmaBuf},
    conn::Conn,
    events::{completion, Events},
    cq::Completion,
};
use crate::{
    kapi::{cell::Lease, trace},
    sys,
};

/// The peer's Send With Invalidate of an rkey, as a Receive of one
/// connection reported it: what [`Conn::release`] takes to skip the
/// LOCAL_INV of the region with that rkey.
///
/// # Invariants
///
/// A Receive of the connection numbered `conn` completed with `rkey`
/// invalidated, when the Sends of that connection numbered up to `sent`
/// were posted and no later one (a region registered by a later Send,
/// which may carry the same rkey after its key wrapped, is not the one the
/// peer invalidated). Only the Receive handler makes one.
///
/// [`Conn::release`]: super::Conn::release
#[derive(Clone, Copy)]
pub(crate) struct RemoteInv {
    pub(super) rkey: u32,
    pub(super) conn: u64,
    pub(super) sent: u64,
}

impl RemoteInv {
    /// The rkey the peer invalidated.
    #[inline]
    pub(crate) fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// What arrived in a Receive.
pub(crate) struct Received<'a> {
    /// The bytes the peer sent.
    pub(crate) data: &'a [u8],
    /// The peer's Send With Invalidate, if it was one.
    pub(crate) invalidated: Option<RemoteInv>,
    /// Set by `hold`: the handler then hands the buffer off to the token
    /// instead of making it idle.
    hold: &'a Cell<bool>,
    index: usize,
    conn: u64,
}

impl Received<'_> {
    /// Keeps the Receive buffer after the handler returns: it is not
    /// reposted until the returned token is given to
    /// [`Conn::release_held`], and [`Conn::with_held`] reads it meanwhile
    /// (a server keeps a call's Receive until its reply is sent).
    pub(crate) fn hold(self) -> HeldRecv {
        self.hold.set(true);
        // INVARIANT: the handler hands the buffer off to this token when
        // it sees the flag; `Received` is consumed, so once per completion.
        HeldRecv { conn: self.conn, index: self.index, len: self.data.len() }
    }
}

/// A Receive buffer its handler kept ([`Received::hold`]): not posted, and
/// reached only through this token.
///
/// # Invariants
///
/// Receive buffer `index` of the connection numbered `conn` was handed off
/// to this token when its Receive completed with `len` bytes, and is not
/// posted until the token is consumed (`release_held`). Only `hold` makes
/// one, once per completion.
#[must_use = "a held Receive is not reposted until it is released"]
pub(crate) struct HeldRecv {
    conn: u64,
    index: usize,
    len: usize,
}

impl<V: Events> Conn<V> {
    /// Posts the idle Receive buffers `next` names, in one chained post.
    /// A buffer that is not idle is skipped. Nothing is posted on a
    /// connection being torn down.
    #[inline(always)]
    pub(crate) fn post_recvs(&self, mut next: impl FnMut() -> Option<usize>) -> Result {
        let qp = self.qp()?;
        if self.dying.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut chain: *mut sys::ib_recv_wr = ptr::null_mut();
        while let Some(i) = next() {
            let Some(mut b) = self.recvs.get(i).and_then(|b| b.cell.lease()) else { continue };
            b.recv_wr.next = chain;
            chain = &raw mut b.recv_wr;
            b.hand_off();
        }
        if chain.is_null() {
            return Ok(());
        }
        // SAFETY: every WR in the chain describes a mapped buffer the
        // connection owns (it outlives the queue pair), handed off to the
        // device.
        match unsafe { qp.post_recv(chain) } {
            Ok(()) => Ok(()),
            Err((e, bad)) => {
                // Those from `bad` on were not posted: idle again. (With
                // no `bad` named, all may have been: they stay away until
                // the teardown, which takes every buffer back.)
                let mut wr = bad;
                while !wr.is_null() {
                    let b = self.recvs.iter().find(|b| ptr::eq(b.wr_of_recv(), wr));
                    // The WR's `next` is read before the buffer is given
                    // back: afterwards it may be posted again.
                    // SAFETY: `wr` is a WR of the chain built above from
                    // buffers handed off and not posted.
                    wr = unsafe { (*wr).next };
                    if let Some(b) = b {
                        // SAFETY: the post stopped at or before it: the
                        // device never saw it.
                        drop(unsafe { b.cell.take_back() });
                    }
                }
                Err(e)
            }
        }
    }

    /// Takes back a held Receive's buffer (`None` if `h` is another
    /// connection's).
    fn take_held(&self, h: &HeldRecv) -> Option<(&DmaBuf, Lease<'_, BufState>)> {
        if h.conn != self.conn_id() {
            return None;
        }
        let buf = self.recvs.get(h.index)?;
        // SAFETY: the buffer was handed to `h` when its Receive completed
        // and has not been posted since (type invariant of `HeldRecv`); `h`
        // is its only token, of this connection (numbers are never
        // reused), borrowed here.
        let b = unsafe { buf.cell.take_back() }?;
        Some((buf, b))
    }

    /// Calls `f` with the bytes of a held Receive; `None` if it is another
    /// connection's.
    pub(crate) fn with_held<R>(&self, h: &HeldRecv, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (_, b) = self.take_held(h)?;
        let r = f(b.data.get(..h.len).unwrap_or(&[]));
        // Back to the token.
        b.hand_off();
        Some(r)
    }

    /// Gives back the held Receives `next` yields, reposted in one chained
    /// post (one doorbell). A token of another connection is skipped (its
    /// buffer went with it or is still that connection's): `EINVAL` once
    /// the others are posted.
    pub(crate) fn release_held_many(&self, mut next: impl FnMut() -> Option<HeldRecv>) -> Result {
        let mut foreign = false;
        let posted = self.post_recvs(|| loop {
            let h = next()?;
            match self.take_held(&h) {
                Some((buf, b)) => {
                    // Idle: posted next.
                    drop(b);
                    return Some(buf.index);
                }
                None => foreign = true,
            }
        });
        posted?;
        if foreign {
            return Err(kernel::error::code::EINVAL);
        }
        Ok(())
    }

    /// Gives a held Receive back: it is reposted at once (not with the
    /// owner's batch, which belongs to the Receive CQ's handler). Fails
    /// with `EINVAL` for another connection's token (whose buffer went
    /// with it or is still that connection's).
    pub(crate) fn release_held(&self, h: HeldRecv) -> Result {
        let (buf, b) = self.take_held(&h).ok_or(kernel::error::code::EINVAL)?;
        drop(b);
        let mut one = Some(buf.index);
        self.post_recvs(|| one.take())
    }
}

impl DmaBuf {
    /// The address of a Receive buffer's work request (to find the buffer
    /// of a WR a failed post names); only compared.
    fn wr_of_recv(&self) -> *const sys::ib_recv_wr {
        // The address of a field, through a shared reference to the cell's
        // value that is never made: `LeaseCell::as_ptr` gives the place.
        // SAFETY: only the address is computed.
        unsafe { ptr::addr_of!((*self.cell.as_ptr()).recv_wr) }
    }
}

/// Receive completion handler.
///
/// # Safety
///
/// Called by ib_core for a Receive posted by a [`Conn<V>`].
pub(super) unsafe extern "C" fn recv_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, buf, wc) = unsafe { completion::<V>(cq, wc) };
    trace::wc_receive(buf.index as u32, wc.status, wc.vendor_err, wc.byte_len);
    if !conn.work_done(Completion::of(wc)) {
        return;
    }
    // SAFETY: the Receive completed: the HCA is done writing the buffer.
    let Some(b) = (unsafe { buf.cell.take_back() }) else { return };
    let len = (wc.byte_len as usize).min(b.data.len());
    // The HCA wrote `len` bytes into this buffer, which is ours (leased)
    // until it is reposted.
    buf.sync_for_cpu(len);
    let invalidated = if wc.wc_flags & sys::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int != 0 {
        // INVARIANT: this Receive reported it, after the Sends numbered up
        // to `sent_seq` were posted (the number is stored once a post
        // succeeded, so a Send posted later has a higher one).
        Some(RemoteInv {
            // SAFETY: `ex` holds the invalidated rkey when the flag is set.
            rkey: unsafe { wc.ex.invalidate_rkey },
            conn: conn.conn_id(),
            sent: conn.sent_seq.load(Ordering::Acquire),
        })
    } else {
        None
    };
    // SAFETY: this is the Receive CQ's handler, which ib_core runs one call
    // at a time: nothing else reaches the state (type invariant of
    // `RecvLocalCell`).
    let Some(local) = (unsafe { &mut *conn.recv_local.0.get() }).as_mut() else { return };
    let hold = Cell::new(false);
    let msg = Received {
        data: b.data.get(..len).unwrap_or(&[]),
        invalidated,
        hold: &hold,
        index: buf.index,
        conn: conn.conn_id(),
    };
    conn.events.received(conn, local, msg);
    if hold.get() {
        // The `HeldRecv` made by `hold` owns it now.
        b.hand_off();
        return;
    }
    drop(b);
    conn.events.recv_idle(conn, local, buf.index);
}
