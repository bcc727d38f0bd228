// SPDX-License-Identifier: GPL-2.0

//! Listeners: an rdma_cm id listening on the address nfsd asked for, and
//! the connection requests it gets, queued until a server thread accepts
//! them (the CM's handler only queues: svcrdma accepts from an nfsd
//! thread, and so do we).

use kernel::{
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
};

use super::{
    ring::Ring,
    xprt::{Role, ServerXprt},
};
use crate::{
    kapi::{
        net::{Net, SockAddr},
        svc::{NewXprt, XptFlag},
    },
    verbs::{Acceptor, ConnRequest, Listener},
};

/// Connection requests a listener keeps waiting for a thread; more are
/// refused (the client tries again).
const BACKLOG: usize = 64;

/// A listener's state.
#[pin_data]
pub(crate) struct ListenState {
    /// Requests not accepted yet, oldest first.
    #[pin]
    queue: SpinLock<Ring<ConnRequest>>,
    /// The rdma_cm listener, until the transport is taken down. Its
    /// acceptor holds a reference of the transport: taking it out breaks
    /// that cycle.
    #[pin]
    listener: SpinLock<Option<Listener<Acc>>>,
}

/// What the listener's CM handler gives requests to.
pub(crate) struct Acc {
    xprt: Arc<ServerXprt>,
}

impl Acceptor for Acc {
    fn request(&self, req: ConnRequest) {
        let Role::Listener(l) = &self.xprt.role else { return };
        let left = l.queue.lock().push(req).err();
        // A request there is no room for is refused: dropped in the CM's
        // handler, which refuses it (the client tries again).
        if left.is_some() {
            drop(left);
            return;
        }
        self.xprt.svc().signal(XptFlag::Conn);
    }
}

impl ListenState {
    /// A listener on `addr` in `net`, for the core's `xpo_create`.
    pub(super) fn create(new: NewXprt<'_, ServerXprt>, net: &Net, addr: &SockAddr) -> Result<Arc<ServerXprt>> {
        let queue = Ring::new(BACKLOG)?;
        let state = KBox::pin_init(
            pin_init!(ListenState {
                queue <- new_spinlock!(queue, "rpcrdma_rs:svc_accept_queue"),
                listener <- new_spinlock!(None, "rpcrdma_rs:svc_listener"),
            }),
            GFP_KERNEL,
        )?;
        let x = ServerXprt::new(new.xprt(addr, None)?, Role::Listener(state))?;
        let acc = Acc { xprt: x.clone() };
        let listener = Listener::new(net, addr, BACKLOG as u32, acc).inspect_err(|e| {
            pr_warn!("rdma server: cannot listen: error {}\n", e.to_errno());
        })?;
        if let Role::Listener(l) = &x.role {
            *l.listener.lock() = Some(listener);
        }
        Ok(x)
    }

    /// The oldest request waiting, if any; `XPT_CONN` cleared when none is
    /// left (set again while some are).
    pub(super) fn next_request(&self, x: &ServerXprt) -> Option<ConnRequest> {
        x.svc().clear_flag(XptFlag::Conn);
        let mut q = self.queue.lock();
        let req = q.pop();
        let more = !q.is_empty();
        drop(q);
        if more {
            x.svc().set_flag(XptFlag::Conn);
        }
        req
    }

    /// Stops listening and refuses the requests still waiting (sleeps).
    pub(super) fn stop(&self) {
        let listener = self.listener.lock().take();
        // Waits for a running request handler.
        drop(listener);
        loop {
            let req = self.queue.lock().pop();
            match req {
                // Refused, out of the lock (destroying its id sleeps).
                Some(r) => drop(r),
                None => break,
            }
        }
    }
}
