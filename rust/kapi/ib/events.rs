// SPDX-License-Identifier: GPL-2.0

//! What reaches a connection's owner: the [`Events`] it implements, the
//! rdma_cm handler that forwards CM events to it, and how a completion
//! finds its connection and buffer.

use core::sync::atomic::Ordering;

use kernel::{alloc::KVec, ffi::c_int};

use super::{
    buf::DmaBuf,
    cm::CmEvent,
    conn::Conn,
    cq::Completion,
    rq::Received,
    sq::SendPolicy,
};
use crate::sys;

/// What a connection's owner does with its events. Its state lives in the
/// connection, pinned ([`ConnBox::new`](super::ConnBox::new)); the handlers get it by
/// reference, with the connection where they may post.
pub(crate) trait Events: Send + Sync + Sized {
    /// The Send policy, kept under the lock that orders Sends (`Unpin`:
    /// the kernel crate lends a lock's contents mutably only then).
    type Sends: SendPolicy + Unpin;

    /// What the Receive CQ's handler keeps between calls (reached only by
    /// it: ib_core runs it one call at a time).
    type RecvLocal: Send;

    /// An rdma_cm event arrived. Runs in the CM's work context.
    fn cm_event(&self, event: CmEvent<'_>);

    /// A Receive completed successfully; its buffer is held over the call.
    /// Runs in process context and may sleep.
    fn received(&self, conn: &Conn<Self>, local: &mut Self::RecvLocal, msg: Received<'_>);

    /// Receive buffer `index` is idle again after [`Events::received`]
    /// (it was not held): the owner reposts it when it suits
    /// ([`Conn::post_recvs`]).
    fn recv_idle(&self, conn: &Conn<Self>, local: &mut Self::RecvLocal, index: usize);

    /// A Receive, REG_MR or LOCAL_INV failed (not flushed): the
    /// connection must be dropped.
    fn work_failed(&self, status: u32);

    /// A work request came back flushed before the connection's teardown
    /// began: the queue pair went to the error state for a reason no
    /// completion of ours shows (an error its responder hit serving the
    /// peer, a disconnect). The connection must be dropped. Called for
    /// each such completion.
    fn flushed(&self);

    /// A Send completion arrived (signalled, or flushed); the policy said
    /// it gave `reclaimed` Send buffers back.
    fn send_completed(&self, how: Completion, reclaimed: usize);

    /// The liveness probe ([`Conn::probe`]) completed.
    fn probe_done(&self, how: Completion);

    /// A test hook: true if the next Send that carries REG_MRs is to be
    /// posted without its Send, as if the device had taken only part of
    /// the chain. Never, unless the owner says so.
    fn inject_partial_post(&self) -> bool {
        false
    }

    /// A test hook: true if the next R/W operation posted alone
    /// ([`Conn::rw_post`]) is to be posted without its last work request.
    /// Never, unless the owner says so.
    fn inject_partial_rw_post(&self) -> bool {
        false
    }

    /// An R/W operation posted alone ([`Conn::rw_post`]) completed; its
    /// `cookie`. Nothing unless the owner says otherwise.
    fn rw_done(&self, _cookie: u64, _how: Completion) {}

    /// The connection is being torn down: its Receive buffers, unmapped,
    /// for the owner to keep or free.
    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>);
}

impl<V: Events> Conn<V> {
    /// A completion came back flushed: our own teardown (`dying`) flushes
    /// everything and says nothing; any other flush is news to the owner.
    pub(super) fn note_flushed(&self) {
        if !self.dying.load(Ordering::Acquire) {
            self.events.flushed();
        }
    }

    /// How a Receive, REG_MR or LOCAL_INV went: true if it succeeded; a
    /// failure goes to [`Events::work_failed`], a flush to
    /// [`Conn::note_flushed`].
    pub(super) fn work_done(&self, how: Completion) -> bool {
        match how {
            Completion::Ok => return true,
            Completion::Flushed => self.note_flushed(),
            Completion::Failed(status) => self.events.work_failed(status),
        }
        false
    }

}

/// rdma_cm event handler.
///
/// # Safety
///
/// Called by rdma_cm for an id created by [`ConnBox::new`], whose context
/// is the connection's pinned `events`.
pub(super) unsafe extern "C" fn cm_handler<V: Events>(id: *mut sys::rdma_cm_id, event: *mut sys::rdma_cm_event) -> c_int {
    // SAFETY: per the contract; the id and event are valid for the call.
    let (events, ev) = unsafe { (&*(*id).context.cast::<V>(), &*event) };
    // SAFETY: `ev` is this running handler's event.
    let event = unsafe { CmEvent::decode(ev) };
    events.cm_event(event);
    0
}

/// Recovers the connection and buffer of a completion.
///
/// # Safety
///
/// `cq` must be one of a live `Conn<V>`'s CQs and `wc` a completion whose
/// `wr_cqe` is the CQE of one of its buffers.
pub(super) unsafe fn completion<'a, V: Events>(
    cq: *mut sys::ib_cq,
    wc: *mut sys::ib_wc,
) -> (&'a Conn<V>, &'a DmaBuf, &'a sys::ib_wc) {
    // SAFETY: per the contract, `cq_context` is the `Conn<V>` and `wr_cqe`
    // is the `cqe` field of a `DmaBuf` it owns; both outlive this completion.
    unsafe {
        let conn = &*(*cq).cq_context.cast::<Conn<V>>();
        let wc = &*wc;
        let cqe = wc.__bindgen_anon_1.wr_cqe;
        let buf = &*cqe.cast::<u8>().sub(core::mem::offset_of!(DmaBuf, cqe)).cast::<DmaBuf>();
        (conn, buf, wc)
    }
}
