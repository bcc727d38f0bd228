// SPDX-License-Identifier: GPL-2.0

//! The server's transport object: a listener or a connection, each an
//! [`SvcXprt`] the core reaches, and the `rdma` class it belongs to.

use kernel::{c_str, prelude::*, str::CStr, sync::Arc};

use super::{
    accept,
    listen::ListenState,
    recv::{CallChunks, ConnState},
};
use crate::verbs::Connection;
use crate::{
    kapi::{
        net::{Net, SockAddr},
        svc::{NewXprt, PayloadRqst, RecvRqst, SendRqst, SvcClassSlot, SvcClassSlotRef, SvcTransport, SvcXprt, SvcXprtOwner},
    },
    verbs::{CmEvent, Completion, ConnHandler, Live, Received, VerbsCounters},
};

/// `XPRT_TRANSPORT_RDMA`: the ident nfsd finds the backchannel's class by
/// (with `XPRT_TRANSPORT_BC` set).
pub(super) const XPRT_TRANSPORT_RDMA: u32 = 256;

/// Most bytes of an RPC's payload (`RPCSVC_MAXPAYLOAD_RDMA` on 6.12).
pub(super) const MAX_PAYLOAD: u32 = 1 << 20;

/// The class's registration slot.
static SLOT: SvcClassSlot = SvcClassSlot::new();

/// A listener or a connection of the `rdma` server class.
#[pin_data]
pub(crate) struct ServerXprt {
    #[pin]
    xprt: SvcXprt<ServerXprt>,
    pub(super) role: Role,
}

/// What the transport is.
pub(super) enum Role {
    /// Listening for connection requests.
    Listener(Pin<KBox<ListenState>>),
    /// A connection to a client.
    Conn(Pin<KBox<ConnState>>),
}

impl ServerXprt {
    /// A transport `xprt` for `role`.
    pub(super) fn new(xprt: impl PinInit<SvcXprt<ServerXprt>>, role: Role) -> Result<Arc<Self>> {
        Arc::pin_init(try_pin_init!(ServerXprt { xprt <- xprt, role }), GFP_KERNEL)
    }

    /// The transport as the core knows it.
    pub(super) fn svc(&self) -> &SvcXprt<ServerXprt> {
        &self.xprt
    }
}

impl SvcXprtOwner for ServerXprt {
    /// A connection's RDMA connection, attached once accepted: the core's
    /// calls reach it without a lock.
    type Attached = Arc<Connection<ServerXprt>>;

    fn svc_xprt(&self) -> &SvcXprt<Self> {
        &self.xprt
    }
}

impl SvcTransport for ServerXprt {
    const NAME: &'static CStr = c_str!("rdma");
    const IDENT: u32 = XPRT_TRANSPORT_RDMA;
    const MAX_PAYLOAD: u32 = MAX_PAYLOAD;
    const SLOT: SvcClassSlotRef = SvcClassSlotRef::new(&SLOT);
    type CallCtxt = CallChunks;

    fn create(new: NewXprt<'_, Self>, net: &Net, addr: &SockAddr) -> Result<Arc<Self>> {
        ListenState::create(new, net, addr)
    }

    fn accept(&self, new: NewXprt<'_, Self>) -> Option<Arc<Self>> {
        match &self.role {
            Role::Listener(l) => accept::accept(self, l, new),
            Role::Conn(_) => None,
        }
    }

    fn has_wspace(&self) -> bool {
        true
    }

    fn recvfrom(&self, conn: Option<&Arc<Connection<ServerXprt>>>, rq: &mut RecvRqst<'_, CallChunks>) {
        if let (Role::Conn(c), Some(conn)) = (&self.role, conn) {
            c.recvfrom(self, conn, rq);
        }
    }

    fn result_payload(rq: &mut PayloadRqst<'_, CallChunks>, offset: u32, length: u32) -> Result {
        match rq.ctxt_mut() {
            Some(c) => c.note_payload(offset, length),
            // No Write chunk: the payload goes inline.
            None => Ok(()),
        }
    }

    fn sendto(&self, conn: Option<&Arc<Connection<ServerXprt>>>, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        match (&self.role, conn) {
            (Role::Conn(c), Some(conn)) => c.sendto(self, conn, rq),
            // Never: a connection is attached before the core takes it.
            (Role::Conn(_), None) => Err(crate::kapi::errno::ENOTCONN()),
            (Role::Listener(_), _) => Err(EINVAL),
        }
    }

    fn detach(&self, conn: Option<&Arc<Connection<ServerXprt>>>) {
        match &self.role {
            Role::Listener(l) => l.stop(),
            Role::Conn(c) => c.detach(conn.map(|c| &**c)),
        }
    }

    fn free(&self, conn: Option<Arc<Connection<ServerXprt>>>) {
        match &self.role {
            // Breaks the cycles a listener's acceptor and a connection's
            // handler make with this object.
            Role::Listener(l) => l.stop(),
            Role::Conn(c) => c.free(conn),
        }
    }

    fn release_ctxt(&self, ctxt: KBox<CallChunks>) {
        match &self.role {
            Role::Conn(c) => c.keep_chunks(ctxt),
            Role::Listener(_) => drop(ctxt),
        }
    }
}

impl ConnHandler for ServerXprt {
    fn cm_event(&self, event: CmEvent<'_>) {
        if matches!(
            event,
            CmEvent::Disconnected
                | CmEvent::DeviceRemoval
                | CmEvent::ConnectError(_)
                | CmEvent::Unreachable(_)
                | CmEvent::Rejected(..)
        ) {
            self.xprt.close_later();
        }
    }

    fn received(&self, conn: Live<'_, Self>, msg: Received<'_>) {
        if let Role::Conn(c) = &self.role {
            c.received(self, conn, msg);
        }
    }

    fn receive_failed(&self, _status: u32) {
        self.xprt.close_later();
    }

    fn queue_pair_flushed(&self) {
        self.xprt.close_later();
    }

    fn invalidate_failed(&self) {
        self.xprt.close_later();
    }

    fn send_done(&self, how: Completion) {
        if let Role::Conn(c) = &self.role {
            c.send_done(how);
        }
        if matches!(how, Completion::Failed(_)) {
            self.xprt.close_later();
        }
    }

    fn probe_done(&self, _how: Completion) {}

    fn rw_done(&self, _cookie: u64, how: Completion) {
        // A call's Reads (the only R/W operations posted alone): a thread
        // finishes the call.
        if let Role::Conn(c) = &self.role {
            c.pull_done(self);
        }
        if matches!(how, Completion::Failed(_)) {
            self.xprt.close_later();
        }
    }

    fn counters(&self) -> &'static VerbsCounters {
        &super::stats::COUNTERS.verbs
    }

    fn released(&self) {
        if let Role::Conn(c) = &self.role {
            c.sends_freed();
        }
    }
}
