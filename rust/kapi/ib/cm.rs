// SPDX-License-Identifier: GPL-2.0

//! An rdma_cm identifier (`struct rdma_cm_id`) and its events.

use core::ptr::{self, NonNull};

use kernel::{
    error::{from_err_ptr, to_result, Result},
    ffi::{c_int, c_ulong, c_void},
};

use super::device::Device;
use crate::{
    kapi::net::{Net, SockAddr},
    sys,
};

/// An rdma_cm event, as a connection's handler sees it.
#[derive(Debug)]
pub(crate) enum CmEvent<'a> {
    /// Address resolution finished.
    AddrResolved,
    /// Address resolution failed (status).
    AddrError(i32),
    /// Route resolution finished.
    RouteResolved,
    /// Route resolution failed (status).
    RouteError(i32),
    /// The connection is up; the peer's private data.
    Established(&'a [u8]),
    /// The peer rejected the connection (status, private data).
    Rejected(i32, &'a [u8]),
    /// The peer cannot be reached (status).
    Unreachable(i32),
    /// Connection establishment failed (status).
    ConnectError(i32),
    /// The connection is gone.
    Disconnected,
    /// The RDMA device is being removed.
    DeviceRemoval,
    /// The local address changed.
    AddrChange,
    /// A peer asks to connect (a listener's event; private data).
    ConnectRequest(&'a [u8]),
    /// Any other event.
    Other,
}

impl<'a> CmEvent<'a> {
    /// Decodes an event rdma_cm delivered.
    ///
    /// # Safety
    ///
    /// `ev` is the event of a running rdma_cm handler: its private data
    /// (for connection events) stays valid for `'a`, the handler's call.
    pub(super) unsafe fn decode(ev: &'a sys::rdma_cm_event) -> Self {
        let pdata = || -> &'a [u8] {
            // SAFETY: for connection events `param.conn` describes the
            // peer's private data, valid for `'a` (contract).
            unsafe {
                let conn = &ev.param.conn;
                if conn.private_data.is_null() {
                    &[]
                } else {
                    core::slice::from_raw_parts(conn.private_data.cast::<u8>(), conn.private_data_len.into())
                }
            }
        };
        let status = ev.status;
        match ev.event {
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => CmEvent::AddrResolved,
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => CmEvent::AddrError(status),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => CmEvent::RouteResolved,
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => CmEvent::RouteError(status),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => CmEvent::Established(pdata()),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => CmEvent::Rejected(status, pdata()),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => CmEvent::Unreachable(status),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => CmEvent::ConnectError(status),
            sys::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => CmEvent::Disconnected,
            sys::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => CmEvent::DeviceRemoval,
            sys::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => CmEvent::AddrChange,
            sys::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST => CmEvent::ConnectRequest(pdata()),
            _ => CmEvent::Other,
        }
    }
}

/// The parameters of an active connect (`struct rdma_conn_param`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnParam<'a> {
    /// Sent to the peer (at most 255 bytes; rdma_cm copies it).
    pub(crate) private_data: &'a [u8],
    /// RDMA Reads the peer may have outstanding against us.
    pub(crate) responder_resources: u8,
    /// RDMA Reads we may have outstanding against the peer.
    pub(crate) initiator_depth: u8,
    /// Hardware flow control.
    pub(crate) flow_control: bool,
    /// Retries of a transport error.
    pub(crate) retry_count: u8,
    /// Retries of a receiver-not-ready.
    pub(crate) rnr_retry_count: u8,
}

/// An rdma_cm identifier, destroyed on drop (which waits for a running
/// event handler).
///
/// # Invariants
///
/// `id` was created by [`CmId::new`] and is destroyed only by `Drop`.
pub(crate) struct CmId {
    id: NonNull<sys::rdma_cm_id>,
}

// SAFETY: rdma_cm serialises operations on an id itself (its handler lock
// and state machine); the Rust side only passes the pointer to rdma_cm and
// reads fields rdma_cm set before the calls that depend on them.
unsafe impl Send for CmId {}
// SAFETY: see `Send`.
unsafe impl Sync for CmId {}

/// The signature of an rdma_cm event handler.
pub(super) type CmHandlerFn = unsafe extern "C" fn(*mut sys::rdma_cm_id, *mut sys::rdma_cm_event) -> c_int;

impl CmId {
    /// Creates an RC identifier in `net` (rdma_cm takes its own reference
    /// on the namespace); its events call `handler` with `context` in the
    /// id's `context`.
    ///
    /// # Safety
    ///
    /// `context` must stay valid for `handler` until the id is dropped.
    pub(super) unsafe fn new(net: &Net, handler: CmHandlerFn, context: *mut c_void) -> Result<Self> {
        // SAFETY: `net` is live (borrowed); `context` per the contract.
        let id = from_err_ptr(unsafe { sys::rpcrdma_rs_create_id(net.as_ptr(), Some(handler), context) })?;
        // INVARIANT: just created.
        NonNull::new(id).map(|id| CmId { id }).ok_or(kernel::error::code::ENOMEM)
    }

    /// Takes over the identifier of a connection request (rdma_cm made it
    /// for the listener's handler and context): its events now call
    /// `handler` with `context`.
    ///
    /// # Safety
    ///
    /// `id` is a connection request's new id, inside the listener's
    /// handler for it (which holds the id's handler mutex); `context` must
    /// stay valid for `handler` until the returned value is dropped. If the
    /// caller then makes the listener's handler fail (so that rdma_cm
    /// destroys the id itself), it must `forget` the value instead.
    pub(super) unsafe fn adopt(id: NonNull<sys::rdma_cm_id>, handler: CmHandlerFn, context: *mut c_void) -> Self {
        // SAFETY: per the contract, nothing reads the fields meanwhile.
        unsafe { sys::rpcrdma_rs_cm_id_set_handler(id.as_ptr(), Some(handler), context) };
        // INVARIANT: the caller owns the id from now on (contract).
        CmId { id }
    }

    /// Binds to `addr` and listens for connection requests, which arrive
    /// as `RDMA_CM_EVENT_CONNECT_REQUEST` with a new id.
    pub(crate) fn listen(&self, addr: &SockAddr, backlog: u32) -> Result {
        // One address family per id, as svcrdma's listeners: an IPv6 id on
        // the port of an IPv4 one must not claim IPv4 too (nfsd makes both).
        // SAFETY: the id is live and not bound yet.
        to_result(unsafe { sys::rdma_set_afonly(self.id.as_ptr(), 1) })?;
        // SAFETY: the id is live; rdma_cm copies the address.
        to_result(unsafe { sys::rdma_bind_addr(self.id.as_ptr(), addr.as_ptr().cast_mut()) })?;
        // SAFETY: the id is live and bound.
        to_result(unsafe { sys::rdma_listen(self.id.as_ptr(), backlog.min(c_int::MAX as u32) as c_int) })
    }

    /// Accepts the connection request this id was made for, with the
    /// queue pair already created on it.
    pub(crate) fn accept(&self, p: &ConnParam<'_>) -> Result {
        let mut param = Self::raw_param(p)?;
        // SAFETY: the id is live; `param` and the private data live for the
        // call.
        to_result(unsafe { sys::rdma_accept(self.id.as_ptr(), &mut param) })
    }

    fn raw_param(p: &ConnParam<'_>) -> Result<sys::rdma_conn_param> {
        Ok(sys::rdma_conn_param {
            private_data: p.private_data.as_ptr().cast(),
            private_data_len: u8::try_from(p.private_data.len()).map_err(|_| kernel::error::code::EINVAL)?,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: u8::from(p.flow_control),
            rnr_retry_count: p.rnr_retry_count,
            retry_count: p.retry_count,
            ..Default::default()
        })
    }

    /// Starts resolving `dst` to a device and address; the outcome arrives
    /// as [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    pub(crate) fn resolve_addr(&self, dst: &SockAddr, timeout_ms: u32) -> Result {
        // SAFETY: the id is live (type invariant); `dst` is a socket address
        // (borrowed for the call), which rdma_cm copies.
        to_result(unsafe {
            sys::rdma_resolve_addr(self.id.as_ptr(), ptr::null_mut(), dst.as_ptr().cast_mut(), timeout_ms as c_ulong)
        })
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: the id is live (type invariant).
        to_result(unsafe { sys::rdma_resolve_route(self.id.as_ptr(), timeout_ms as c_ulong) })
    }

    /// The device the address resolved to; `None` before resolution.
    pub(crate) fn device(&self) -> Option<&Device> {
        // SAFETY: the id is live; `device` is set by address resolution and
        // stays registered while the id holds it.
        let device = unsafe { (*self.id.as_ptr()).device };
        if device.is_null() {
            return None;
        }
        // SAFETY: the device stays valid while the id (borrowed) holds it.
        Some(unsafe { Device::from_raw(device) })
    }

    /// Starts connecting; the outcome arrives as a CM event.
    pub(crate) fn connect(&self, p: &ConnParam<'_>) -> Result {
        let mut param = Self::raw_param(p)?;
        // SAFETY: the id is live; `param` and the private data live for the
        // call (rdma_cm copies the private data).
        to_result(unsafe { sys::rdma_connect(self.id.as_ptr(), &mut param) })
    }

    /// Moves the queue pair (if any) to the error state, flushing every
    /// posted work request, and asks the peer to disconnect. Harmless on
    /// an id that is not connected, or twice.
    pub(crate) fn disconnect(&self) {
        // SAFETY: the id is live (type invariant).
        let _ = unsafe { sys::rdma_disconnect(self.id.as_ptr()) };
    }

    /// The device port the id is bound to.
    pub(super) fn port_num(&self) -> u32 {
        // SAFETY: the id is live; rdma_cm sets the port when it binds the
        // id to a device, before any queue pair exists.
        unsafe { (*self.id.as_ptr()).port_num }
    }

    /// The id, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::rdma_cm_id {
        self.id.as_ptr()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; this waits for a running
        // event handler, after which none starts.
        unsafe { sys::rdma_destroy_id(self.id.as_ptr()) };
    }
}
