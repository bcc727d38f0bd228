// SPDX-License-Identifier: GPL-2.0

//! RDMA Read and Write of local pages against a peer's registered segment,
//! through the kernel's R/W API (`struct rdma_rw_ctx`): how a server moves
//! the data of Read and Write chunks.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{code::EINVAL, Result},
    types::Opaque,
};

use super::mr::DoneFn;
use crate::{
    kapi::page::{in_page, PageRef},
    sys,
};

/// Which way the data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwDir {
    /// RDMA Write: local pages to the peer's segment.
    Write,
    /// RDMA Read: the peer's segment into local pages.
    Read,
}

impl RwDir {
    fn dma(self) -> sys::dma_data_direction {
        match self {
            RwDir::Write => sys::dma_data_direction_DMA_TO_DEVICE,
            RwDir::Read => sys::dma_data_direction_DMA_FROM_DEVICE,
        }
    }
}

/// One R/W operation while it is posted: its context, scatterlist and
/// completion. Boxed and pinned: the device reports the CQE's address.
pub(super) struct RwOp {
    /// Written once; ib_core reads it when the last work request completes.
    pub(super) cqe: sys::ib_cqe,
    pub(super) ctx: Opaque<sys::rdma_rw_ctx>,
    pub(super) sg: KVec<sys::scatterlist>,
    pub(super) dir: RwDir,
    /// Set (under the connection's wait lock) by the completion.
    pub(super) done: AtomicBool,
    pub(super) status: AtomicU32,
}

impl RwOp {
    /// An operation over `pages` (page, offset, length; each inside its
    /// page), whose completion calls `done`.
    pub(super) fn new(
        dir: RwDir,
        pages: &[(PageRef<'_>, u32, u32)],
        done: DoneFn,
    ) -> Result<core::pin::Pin<KBox<Self>>> {
        let n = u32::try_from(pages.len()).map_err(|_| EINVAL)?;
        if n == 0 {
            return Err(EINVAL);
        }
        let mut sg = KVec::from_elem(sys::scatterlist::default(), pages.len(), GFP_KERNEL)?;
        // SAFETY: `sg` has `n` entries.
        unsafe { sys::sg_init_table(sg.as_mut_ptr(), n) };
        for (e, &(page, offset, len)) in sg.iter_mut().zip(pages) {
            if len == 0 || !in_page(offset, len) {
                return Err(EINVAL);
            }
            // The page is live for the borrow of `pages`, which the caller
            // holds until the operation is done (`Conn::rdma_rw` waits for
            // it).
            super::sg::set_page(e, page, len, offset);
        }
        // Setting an entry clears its end mark (entries are reused): mark
        // the last one, or walking the list runs past the table.
        let last = sg.last_mut().ok_or(EINVAL)?;
        super::sg::mark_end(last);
        Ok(KBox::pin(
            RwOp {
                cqe: sys::ib_cqe { done: Some(done) },
                ctx: Opaque::uninit(),
                sg,
                dir,
                done: AtomicBool::new(false),
                status: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    pub(super) fn dma_dir(&self) -> sys::dma_data_direction {
        self.dir.dma()
    }

    /// Records the completion.
    pub(super) fn complete(&self, status: u32) {
        self.status.store(status, Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}
