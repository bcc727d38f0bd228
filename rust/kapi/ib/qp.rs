// SPDX-License-Identifier: GPL-2.0

//! An RC queue pair (`struct ib_qp`) made on an rdma_cm identifier.

use core::ptr::{self, NonNull};

use kernel::{
    error::{code::EINVAL, to_result, Error, Result},
    ffi::c_int,
};

use super::{cm::CmId, cq::Cq, pd::Pd};
use crate::sys;

/// Queue depths and scatter/gather limits of a queue pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpCaps {
    /// Send Queue work requests.
    pub(crate) send_wrs: u32,
    /// Receive Queue work requests.
    pub(crate) recv_wrs: u32,
    /// SGEs per Send.
    pub(crate) send_sges: u32,
    /// The port the cm_id is bound to: the R/W API sizes its contexts by
    /// the port's transport (iWARP registers RDMA Read sinks).
    pub(crate) port_num: u32,
    /// R/W contexts in flight at once: the R/W API makes an MR pool of
    /// that many where the device needs one, and adds their work requests
    /// to the Send Queue's depth.
    pub(crate) rdma_ctxs: u32,
}

/// A post that failed: why, and the first work request of the chain that
/// was not posted (those before it were: the device owns them until they
/// complete). Null if the device did not say.
pub(crate) struct PostError {
    pub(crate) err: Error,
    pub(crate) bad: *const sys::ib_send_wr,
}

/// An RC queue pair, attached to its cm_id; drained and destroyed on drop.
///
/// # Invariants
///
/// `qp` was created by [`Qp::new`] on the cm_id `id`, which outlives it,
/// and is destroyed only by `Drop`. `post_send` is its device's
/// `ops.post_send`.
pub(crate) struct Qp {
    qp: NonNull<sys::ib_qp>,
    id: NonNull<sys::rdma_cm_id>,
    post_send: PostSendFn,
    port_num: u32,
}

/// The signature of a device's `post_send` operation.
type PostSendFn = unsafe extern "C" fn(*mut sys::ib_qp, *const sys::ib_send_wr, *mut *const sys::ib_send_wr) -> c_int;

// SAFETY: ib_core serialises posting on a queue pair itself (each queue has
// its lock); the Rust side only passes the pointers to ib_core.
unsafe impl Send for Qp {}
// SAFETY: see `Send`.
unsafe impl Sync for Qp {}

impl Qp {
    /// Creates an RC queue pair on `id` (resolved to a device) in `pd`,
    /// completing Sends on `send_cq` and Receives on `recv_cq`. Every work
    /// request is signalled only if it asks to be.
    ///
    /// # Safety
    ///
    /// `id`, `pd` and both CQs must outlive the queue pair.
    pub(crate) unsafe fn new(id: &CmId, pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Self> {
        let mut attr = sys::ib_qp_init_attr {
            send_cq: send_cq.as_ptr(),
            recv_cq: recv_cq.as_ptr(),
            sq_sig_type: sys::ib_sig_type_IB_SIGNAL_REQ_WR,
            qp_type: sys::ib_qp_type_IB_QPT_RC,
            ..Default::default()
        };
        attr.cap.max_send_wr = caps.send_wrs;
        attr.cap.max_recv_wr = caps.recv_wrs;
        attr.cap.max_send_sge = caps.send_sges;
        attr.cap.max_recv_sge = 1;
        attr.cap.max_rdma_ctxs = caps.rdma_ctxs;
        attr.port_num = caps.port_num;
        let id = id.as_ptr();
        // SAFETY: the id, PD and CQs are live; `attr` lives for the call.
        to_result(unsafe { sys::rdma_create_qp(id, pd.as_ptr(), &mut attr) })?;
        // SAFETY: `rdma_create_qp` succeeded, so the id holds the QP.
        let qp = unsafe { (*id).qp };
        let (Some(qp), Some(id)) = (NonNull::new(qp), NonNull::new(id)) else {
            return Err(EINVAL);
        };
        // `ib_post_send`'s call, looked up once: a device's operations are
        // set before it registers and never change.
        // SAFETY: the QP is live and holds its device, which is registered.
        let Some(post_send) = (unsafe { (*(*qp.as_ptr()).device).ops.post_send }) else {
            // SAFETY: created just above on `id`; nothing else has it.
            unsafe { sys::rdma_destroy_qp(id.as_ptr()) };
            return Err(EINVAL);
        };
        // INVARIANT: created just above on `id`, which outlives it
        // (contract); `post_send` is its device's.
        Ok(Qp { qp, id, post_send, port_num: caps.port_num })
    }

    /// Posts a chain of Send Queue work requests. On failure, the requests
    /// before the one the error names were posted, and belong to the device
    /// until they complete (flushed, if the queue pair goes to the error
    /// state).
    ///
    /// # Safety
    ///
    /// Every request of the chain, and all it points at (SGEs, CQEs,
    /// memory regions), must stay valid until the request completes: the
    /// CQE until its completion handler ran, the buffers until the device
    /// is done with them.
    #[inline(always)]
    pub(super) unsafe fn post_send(&self, wr: *mut sys::ib_send_wr) -> core::result::Result<(), PostError> {
        // Called the way `ib_post_send` does, without a call to get there.
        let mut bad: *const sys::ib_send_wr = ptr::null();
        // SAFETY: the QP is live and `post_send` its device's (type
        // invariant); the chain per the contract; `bad` lives for the call.
        let ret = unsafe { (self.post_send)(self.qp.as_ptr(), wr, &mut bad) };
        if ret >= 0 {
            Ok(())
        } else {
            Err(post_error(ret, bad))
        }
    }

    /// Posts a chain of Receives. On failure, those before the one the
    /// error names were posted (all of them, if it names none).
    ///
    /// # Safety
    ///
    /// As for [`Qp::post_send`].
    #[inline]
    pub(super) unsafe fn post_recv(&self, wr: *mut sys::ib_recv_wr) -> core::result::Result<(), (Error, *const sys::ib_recv_wr)> {
        let mut bad: *const sys::ib_recv_wr = ptr::null();
        // SAFETY: as in `post_send`.
        let ret = unsafe { sys::rpcrdma_rs_post_recv(self.qp.as_ptr(), wr, &mut bad) };
        if ret >= 0 {
            Ok(())
        } else {
            Err((Error::from_errno(ret), bad))
        }
    }

    /// The queue pair, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::ib_qp {
        self.qp.as_ptr()
    }

    /// Moves the queue pair to the error state and waits until every
    /// posted work request has completed (flushed) and its completion
    /// handler has run. Sleeps.
    pub(crate) fn drain(&self) {
        // SAFETY: the QP is live (type invariant).
        unsafe { sys::ib_drain_qp(self.qp.as_ptr()) };
    }

    /// Moves the queue pair to the error state (if it is not there yet)
    /// and waits until every posted Send Queue work request has completed
    /// (flushed) and its completion handler has run. Sleeps.
    pub(crate) fn drain_sq(&self) {
        // SAFETY: the QP is live (type invariant).
        unsafe { sys::ib_drain_sq(self.qp.as_ptr()) };
    }

    /// The port it was created for.
    pub(crate) fn port_num(&self) -> u32 {
        self.port_num
    }

    /// Moves the queue pair to the error state, synchronously: posted work
    /// requests are flushed, and the peer's RDMA operations reach nothing
    /// any more. Sleeps (on some devices).
    pub(crate) fn to_error(&self) {
        // SAFETY: the QP is live (type invariant).
        unsafe { sys::rpcrdma_rs_qp_to_error(self.qp.as_ptr()) };
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created in `new` on `id`, which is still live (type
        // invariant); destroyed once.
        unsafe { sys::rdma_destroy_qp(self.id.as_ptr()) };
    }
}

/// The error of a refused post: out of line, off the posting path.
#[cold]
#[inline(never)]
fn post_error(ret: core::ffi::c_int, bad: *const sys::ib_send_wr) -> PostError {
    PostError { err: Error::from_errno(ret), bad }
}
