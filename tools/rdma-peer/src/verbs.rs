// SPDX-License-Identifier: GPL-2.0
//! The RDMA side of the peer: an rdma_cm listener and one accepted
//! connection with its PD, CQ, QP and a registered buffer. All `unsafe`
//! of the peer lives here. Every message a connection receives or sends
//! also goes through its credit count (`credits`), which logs the client's
//! overruns.

use std::{
    collections::VecDeque,
    io, mem,
    net::SocketAddrV4,
    ptr,
    time::{Duration, Instant},
};

use rdma_mummy_sys as sys;

use crate::{
    checks,
    credits::{self, Account},
    Log,
};

/// `ibv_wc_flags`: the Receive completed a Send With Invalidate.
const IBV_WC_WITH_INV: u32 = 1 << 3;

/// Receive slots posted (the client must never exceed our credits).
pub const RECVS: usize = 32;
/// Send slots (used round-robin; every Send is signalled).
pub const SENDS: usize = 8;
/// Bytes per slot: the largest inline message either side sends.
pub const SLOT: usize = 8192;
/// Bytes of the buffer the peer's RDMA Writes come from (a reply's Write
/// chunk and Reply chunk together).
pub const WRITE_AREA: usize = 3 << 20;
/// Bytes of the buffer the peer's RDMA Reads land in (a call's chunks).
pub const READ_AREA: usize = 2 << 20;
/// Work requests the send queue holds.
const SEND_WRS: usize = 128;

fn os_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A CM event, copied out of librdmacm's (which is acknowledged at once).
pub struct Event {
    /// `rdma_cm_event_type`.
    pub kind: u32,
    /// `RDMA_CM_EVENT_*` name, for the log.
    pub name: &'static str,
    /// The id the event is for (a new one for a connect request).
    pub id: Id,
    /// The event's status.
    pub status: i32,
    /// The private data that came with it.
    pub private_data: Vec<u8>,
    /// From a connect request: the client's responder resources.
    pub responder_resources: u8,
}

/// An rdma_cm identifier the peer has not taken over yet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Id(*mut sys::rdma_cm_id);

impl Id {
    /// Rejects a connect request with `private_data`, and frees the id.
    pub fn reject(self, private_data: &[u8]) -> io::Result<()> {
        let len = u8::try_from(private_data.len()).map_err(|_| io::Error::other("private data too long"))?;
        // SAFETY: `self.0` is a connect request's id that nobody else
        // owns; the private data outlives the call (rdma_cm copies it).
        let rc = unsafe { sys::rdma_reject(self.0, private_data.as_ptr().cast(), len) };
        // SAFETY: as above; after reject the id is ours to destroy.
        unsafe { sys::rdma_destroy_id(self.0) };
        if rc != 0 {
            return Err(os_err("rdma_reject"));
        }
        Ok(())
    }
}

const EVENT_NAMES: [&str; 16] = [
    "ADDR_RESOLVED",
    "ADDR_ERROR",
    "ROUTE_RESOLVED",
    "ROUTE_ERROR",
    "CONNECT_REQUEST",
    "CONNECT_RESPONSE",
    "CONNECT_ERROR",
    "UNREACHABLE",
    "REJECTED",
    "ESTABLISHED",
    "DISCONNECTED",
    "DEVICE_REMOVAL",
    "MULTICAST_JOIN",
    "MULTICAST_ERROR",
    "ADDR_CHANGE",
    "TIMEWAIT_EXIT",
];
/// `RDMA_CM_EVENT_ADDR_RESOLVED`.
const ADDR_RESOLVED: u32 = 0;
/// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
const ROUTE_RESOLVED: u32 = 2;
/// `RDMA_CM_EVENT_CONNECT_REQUEST`.
pub const CONNECT_REQUEST: u32 = 4;
/// `RDMA_CM_EVENT_ESTABLISHED`.
const ESTABLISHED: u32 = 9;
/// `RDMA_CM_EVENT_DISCONNECTED`.
pub const DISCONNECTED: u32 = 10;

/// A listening rdma_cm id and its event channel.
pub struct Listener {
    ch: *mut sys::rdma_event_channel,
    id: *mut sys::rdma_cm_id,
}

impl Listener {
    /// Listens on `addr` (RDMA_PS_TCP, as NFS/RDMA does).
    pub fn bind(addr: SocketAddrV4) -> io::Result<Listener> {
        // SAFETY: plain constructor; checked for NULL.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(os_err("rdma_create_event_channel (is rdma_rxe set up?)"));
        }
        let mut l = Listener { ch, id: ptr::null_mut() };
        // SAFETY: `ch` is valid; `l.id` receives the new id.
        if unsafe { sys::rdma_create_id(ch, &mut l.id, ptr::null_mut(), sys::rdma_port_space::RDMA_PS_TCP) } != 0 {
            return Err(os_err("rdma_create_id"));
        }
        // SAFETY: all zeroes is a valid sockaddr_in.
        let mut sin: libc::sockaddr_in = unsafe { mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = addr.port().to_be();
        sin.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
        // SAFETY: the id is valid and the address lives for the call.
        if unsafe { sys::rdma_bind_addr(l.id, (&mut sin as *mut libc::sockaddr_in).cast()) } != 0 {
            return Err(os_err("rdma_bind_addr"));
        }
        // SAFETY: the id is bound.
        if unsafe { sys::rdma_listen(l.id, 4) } != 0 {
            return Err(os_err("rdma_listen"));
        }
        Ok(l)
    }

    /// The next CM event, or `None` after `timeout`.
    pub fn event(&self, timeout: Duration) -> io::Result<Option<Event>> {
        next_event(self.ch, timeout)
    }
}

/// The next CM event of the channel `ch`, or `None` after `timeout`.
fn next_event(ch: *mut sys::rdma_event_channel, timeout: Duration) -> io::Result<Option<Event>> {
    // SAFETY: the channel is valid (its owner passes it); `fd` is a plain
    // field.
    let fd = unsafe { (*ch).fd };
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        return Err(os_err("poll"));
    }
    if n == 0 {
        return Ok(None);
    }
    let mut ev: *mut sys::rdma_cm_event = ptr::null_mut();
    // SAFETY: the channel is readable, so this does not block.
    if unsafe { sys::rdma_get_cm_event(ch, &mut ev) } != 0 {
        return Err(os_err("rdma_get_cm_event"));
    }
    // SAFETY: `ev` is valid until acknowledged; for connection events
    // `param.conn` describes the private data, valid until then too.
    let out = unsafe {
        let e = &*ev;
        let conn = e.param.conn;
        let pdata = if conn.private_data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(conn.private_data.cast::<u8>(), conn.private_data_len.into()).to_vec()
        };
        Event {
            kind: e.event,
            name: EVENT_NAMES.get(e.event as usize).copied().unwrap_or("OTHER"),
            id: Id(e.id),
            status: e.status,
            private_data: pdata,
            responder_resources: conn.responder_resources,
        }
    };
    // SAFETY: acknowledged once, after everything was copied out.
    unsafe { sys::rdma_ack_cm_event(ev) };
    Ok(Some(out))
}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: created in `bind`; destroyed once.
        unsafe {
            if !self.id.is_null() {
                sys::rdma_destroy_id(self.id);
            }
            sys::rdma_destroy_event_channel(self.ch);
        }
    }
}

/// What a completion was.
#[derive(Debug)]
pub enum Completion {
    /// A message arrived in Receive slot `slot` (`len` bytes), by Send
    /// With Invalidate of `invalidated` if it was one.
    Recv { slot: usize, len: usize, invalidated: Option<u32> },
    /// A Send, RDMA Read or other work request completed.
    Sent { wr_id: u64 },
    /// A work request failed with this `ibv_wc_status` (flushes included).
    Failed { status: u32, recv: bool, wr_id: u64 },
}

/// Where in the client's memory an RDMA Read or Write goes: one segment of
/// a chunk (handle, length, offset as the client advertised them).
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub rkey: u32,
    pub len: u32,
    pub addr: u64,
}

/// An accepted connection, or (the hostile client) one we made.
pub struct Conn {
    id: *mut sys::rdma_cm_id,
    /// The event channel of a connection we made (null if accepted): its
    /// id's events, destroyed after the id.
    ch: *mut sys::rdma_event_channel,
    /// We made the connection: we are the requester, and the credit
    /// count (of a requester's calls) does not apply.
    active: bool,
    pd: *mut sys::ibv_pd,
    cq: *mut sys::ibv_cq,
    mr: *mut sys::ibv_mr,
    buf: Box<[u8]>,
    next_send: usize,
    /// For each send slot, the Send posted from it that has not completed
    /// yet: the slot is not written again before it has.
    slot_wr: [Option<u64>; SENDS],
    qp_created: bool,
    /// Completions polled while waiting for a particular one.
    stash: VecDeque<Completion>,
    /// The client's messages outstanding against the grants sent.
    credits: Account,
    /// The peer decodes Version Two (else answers it with ERR_VERS).
    speaks_v2: bool,
    /// Where overruns are logged.
    log: Log,
}

const WR_RECV: u64 = 1 << 32;
/// The work request id of the last RDMA Read of a chain.
const WR_READ: u64 = 1 << 33;

impl Conn {
    /// The connection of `id` (a connect request's, or one whose route is
    /// resolved) with its PD, CQ, QP and registered buffer, [`RECVS`]
    /// Receives posted. `ch` is the event channel it owns (null for an
    /// accepted one).
    fn setup(id: *mut sys::rdma_cm_id, ch: *mut sys::rdma_event_channel, speaks_v2: bool, log: Log) -> io::Result<Conn> {
        let total = (RECVS + SENDS) * SLOT + WRITE_AREA + READ_AREA;
        let mut c = Conn {
            id,
            ch,
            active: !ch.is_null(),
            pd: ptr::null_mut(),
            cq: ptr::null_mut(),
            mr: ptr::null_mut(),
            buf: vec![0u8; total].into_boxed_slice(),
            next_send: 0,
            slot_wr: [None; SENDS],
            qp_created: false,
            stash: VecDeque::new(),
            credits: Account::default(),
            speaks_v2,
            log,
        };
        // SAFETY: `id` has its device context (a connect request's id, or
        // one with a resolved route); every object is checked and released
        // by `Drop` in reverse order.
        unsafe {
            let ctx = (*id).verbs;
            c.pd = sys::ibv_alloc_pd(ctx);
            if c.pd.is_null() {
                return Err(os_err("ibv_alloc_pd"));
            }
            c.cq = sys::ibv_create_cq(ctx, (RECVS + SEND_WRS) as i32, ptr::null_mut(), ptr::null_mut(), 0);
            if c.cq.is_null() {
                return Err(os_err("ibv_create_cq"));
            }
            let mut attr: sys::ibv_qp_init_attr = mem::zeroed();
            attr.send_cq = c.cq;
            attr.recv_cq = c.cq;
            attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
            attr.cap.max_send_wr = SEND_WRS as u32;
            attr.cap.max_recv_wr = RECVS as u32;
            attr.cap.max_send_sge = 1;
            attr.cap.max_recv_sge = 1;
            if sys::rdma_create_qp(id, c.pd, &mut attr) != 0 {
                return Err(os_err("rdma_create_qp"));
            }
            c.qp_created = true;
            let access = (sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ
                | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE)
                .0 as i32;
            c.mr = sys::ibv_reg_mr(c.pd, c.buf.as_mut_ptr().cast(), total, access);
            if c.mr.is_null() {
                return Err(os_err("ibv_reg_mr"));
            }
        }
        for slot in 0..RECVS {
            c.post_recv(slot)?;
        }
        Ok(c)
    }

    /// Accepts the connect request `id` with `private_data`: creates the
    /// QP, posts [`RECVS`] Receives, then accepts. `speaks_v2` and `log`
    /// are for the credit count.
    pub fn accept(id: Id, private_data: &[u8], req_initiator_depth: u8, speaks_v2: bool, log: Log) -> io::Result<Conn> {
        let c = Conn::setup(id.0, ptr::null_mut(), speaks_v2, log)?;
        let len = u8::try_from(private_data.len()).map_err(|_| io::Error::other("private data too long"))?;
        // SAFETY: all zeroes is a valid rdma_conn_param.
        let mut p: sys::rdma_conn_param = unsafe { mem::zeroed() };
        p.private_data = private_data.as_ptr().cast();
        p.private_data_len = len;
        // The client reads nothing from us by RDMA Read; we read its Read
        // chunks with as many Reads in flight as it can answer.
        p.responder_resources = 0;
        p.initiator_depth = req_initiator_depth.max(1);
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        // SAFETY: the id has its QP; `p` and the private data live for the
        // call (rdma_cm copies the private data).
        if unsafe { sys::rdma_accept(c.id, &mut p) } != 0 {
            return Err(os_err("rdma_accept"));
        }
        Ok(c)
    }

    /// Connects to the server at `addr` with `private_data` (the hostile
    /// client): resolves the address and route, creates the QP, posts
    /// [`RECVS`] Receives, connects, and waits (up to 30 s) until the
    /// connection is established. The server may RDMA Read our buffer
    /// (16 Reads in flight).
    pub fn connect(addr: SocketAddrV4, private_data: &[u8], log: Log) -> io::Result<Conn> {
        // SAFETY: plain constructor; checked for NULL.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(os_err("rdma_create_event_channel (is rdma_rxe set up?)"));
        }
        let mut id: *mut sys::rdma_cm_id = ptr::null_mut();
        // SAFETY: `ch` is valid; `id` receives the new id.
        if unsafe { sys::rdma_create_id(ch, &mut id, ptr::null_mut(), sys::rdma_port_space::RDMA_PS_TCP) } != 0 {
            let e = os_err("rdma_create_id");
            // SAFETY: created above, no id on it.
            unsafe { sys::rdma_destroy_event_channel(ch) };
            return Err(e);
        }
        let wait = |want: u32, what: &str| -> io::Result<Event> {
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Some(ev) = next_event(ch, Duration::from_millis(200))? {
                    if ev.kind == want {
                        return Ok(ev);
                    }
                    return Err(io::Error::other(format!("{what}: CM event {} (status {})", ev.name, ev.status)));
                }
            }
            Err(io::Error::other(format!("{what}: no CM event in 30 s")))
        };
        // From here the id and channel are released by `Conn`'s Drop, or
        // by `free` below while there is no `Conn`.
        let free = |id: *mut sys::rdma_cm_id| {
            // SAFETY: created above, destroyed once, id first.
            unsafe {
                sys::rdma_destroy_id(id);
                sys::rdma_destroy_event_channel(ch);
            }
        };
        // SAFETY: all zeroes is a valid sockaddr_in.
        let mut sin: libc::sockaddr_in = unsafe { mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = addr.port().to_be();
        sin.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
        // SAFETY: the id is valid and the address lives for the call.
        let resolved = unsafe { sys::rdma_resolve_addr(id, ptr::null_mut(), (&mut sin as *mut libc::sockaddr_in).cast(), 5000) };
        if resolved != 0 {
            let e = os_err("rdma_resolve_addr");
            free(id);
            return Err(e);
        }
        if let Err(e) = wait(ADDR_RESOLVED, "resolving the address") {
            free(id);
            return Err(e);
        }
        // SAFETY: the address is resolved.
        if unsafe { sys::rdma_resolve_route(id, 5000) } != 0 {
            let e = os_err("rdma_resolve_route");
            free(id);
            return Err(e);
        }
        if let Err(e) = wait(ROUTE_RESOLVED, "resolving the route") {
            free(id);
            return Err(e);
        }
        // Owns the id and channel from here (Drop releases them).
        let c = Conn::setup(id, ch, false, log)?;
        let len = u8::try_from(private_data.len()).map_err(|_| io::Error::other("private data too long"))?;
        // SAFETY: all zeroes is a valid rdma_conn_param.
        let mut p: sys::rdma_conn_param = unsafe { mem::zeroed() };
        p.private_data = private_data.as_ptr().cast();
        p.private_data_len = len;
        // The server reads our Read chunks; we read nothing of its.
        p.responder_resources = 16;
        p.initiator_depth = 1;
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        // SAFETY: the id has its QP; `p` and the private data live for the
        // call (rdma_cm copies the private data).
        if unsafe { sys::rdma_connect(c.id, &mut p) } != 0 {
            return Err(os_err("rdma_connect"));
        }
        wait(ESTABLISHED, "connecting")?;
        Ok(c)
    }

    /// Puts `data` at the start of the area the server's RDMA Reads read
    /// (a call's Read chunks), and returns that area as a segment of
    /// `data`'s length, under our buffer's rkey.
    pub fn readable(&mut self, data: &[u8]) -> io::Result<Remote> {
        if data.len() > READ_AREA {
            return Err(io::Error::other("data over the read area"));
        }
        let at = (RECVS + SENDS) * SLOT + WRITE_AREA;
        self.buf[at..at + data.len()].copy_from_slice(data);
        Ok(Remote { rkey: self.own_rkey(), len: data.len() as u32, addr: self.buf[at..].as_ptr() as u64 })
    }

    /// The area the server's RDMA Writes may write (a call's Write or
    /// Reply chunk), `len` bytes of it, under our buffer's rkey.
    pub fn writable(&self, len: u32) -> Remote {
        let at = (RECVS + SENDS) * SLOT;
        Remote { rkey: self.own_rkey(), len: len.min(WRITE_AREA as u32), addr: self.buf[at..].as_ptr() as u64 }
    }

    /// The first `len` bytes of the area [`Conn::writable`] offers: what
    /// the server wrote there by RDMA Write, or what we put there before.
    pub fn write_area(&mut self, len: usize) -> &mut [u8] {
        let at = (RECVS + SENDS) * SLOT;
        &mut self.buf[at..at + len.min(WRITE_AREA)]
    }

    fn lkey(&self) -> u32 {
        // SAFETY: registered in `setup`.
        unsafe { (*self.mr).lkey }
    }

    /// The rkey of the peer's own buffer (for "an rkey that is not yours").
    pub fn own_rkey(&self) -> u32 {
        // SAFETY: registered in `setup`.
        unsafe { (*self.mr).rkey }
    }

    fn qp(&self) -> *mut sys::ibv_qp {
        // SAFETY: the id owns its QP.
        unsafe { (*self.id).qp }
    }

    /// Posts the Receive of `slot` again.
    pub fn post_recv(&mut self, slot: usize) -> io::Result<()> {
        let mut sge = sys::ibv_sge { addr: self.buf[slot * SLOT..].as_ptr() as u64, length: SLOT as u32, lkey: self.lkey() };
        let mut wr = sys::ibv_recv_wr { wr_id: WR_RECV | slot as u64, next: ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is valid; the WR and SGE live for the call and
        // describe registered memory the connection owns.
        if unsafe { sys::ibv_post_recv(self.qp(), &mut wr, &mut bad) } != 0 {
            return Err(os_err("ibv_post_recv"));
        }
        Ok(())
    }

    /// The bytes of Receive slot `slot`.
    pub fn received(&self, slot: usize, len: usize) -> &[u8] {
        &self.buf[slot * SLOT..slot * SLOT + len.min(SLOT)]
    }

    /// The next completion, if any (those polled while waiting for a
    /// particular one first). Everything the CQ holds is polled first, so
    /// that every message that arrived is counted before the peer answers
    /// the next one.
    pub fn poll(&mut self) -> io::Result<Option<Completion>> {
        self.drain()?;
        Ok(self.stash.pop_front())
    }

    /// Polls every completion there is into the stash.
    fn drain(&mut self) -> io::Result<()> {
        while let Some(c) = self.poll_cq()? {
            self.stash.push_back(c);
        }
        Ok(())
    }

    /// The call `xid` is waiting for an answer on this connection.
    pub fn is_pending(&self, xid: u32) -> bool {
        self.credits.is_pending(xid)
    }

    /// The peer drops the call `xid` and will never answer it: it no
    /// longer counts.
    pub fn forget(&mut self, xid: u32) {
        self.credits.forget(xid);
    }

    /// Counts a message that arrived in Receive slot `slot`; logs an
    /// overrun, and each new peak.
    fn count_arrival(&mut self, slot: usize, len: usize) {
        if let Some((hdr, rpc)) = checks::xid_mismatch(self.received(slot, len)) {
            self.log.line(&format!("xid mismatch: header {hdr:#x}, RPC message {rpc:#x}"));
        }
        let kind = credits::inbound(self.received(slot, len), self.speaks_v2);
        if let Some(a) = self.credits.arrive(kind) {
            if a.overrun() {
                self.log.line(&a.to_string());
            }
            if a.new_peak {
                self.log.line(&format!("credits: {} outstanding, the most so far (grant {})", a.outstanding, a.grant));
            }
        }
    }

    /// Waits (up to 120 s: a Send may wait out RNR retries behind a
    /// flood) for the completion of work request `wr_id`; keeps the others
    /// for [`Conn::poll`].
    fn wait_for(&mut self, wr_id: u64) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            match self.poll_cq()? {
                Some(Completion::Sent { wr_id: id }) if id == wr_id => return Ok(()),
                Some(Completion::Failed { wr_id: id, status, .. }) if id == wr_id => {
                    return Err(io::Error::other(format!("work request failed: status {status}")))
                }
                Some(c) => self.stash.push_back(c),
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        Err(io::Error::other("work request did not complete in 120 s"))
    }

    fn poll_cq(&mut self) -> io::Result<Option<Completion>> {
        // SAFETY: all zeroes is a valid ibv_wc.
        let mut wc: sys::ibv_wc = unsafe { mem::zeroed() };
        // SAFETY: the CQ is valid; room for one completion.
        let n = unsafe { sys::ibv_poll_cq(self.cq, 1, &mut wc) };
        if n < 0 {
            return Err(os_err("ibv_poll_cq"));
        }
        if n == 0 {
            return Ok(None);
        }
        let recv = wc.wr_id & WR_RECV != 0;
        if !recv {
            // A Send done with (or flushed): its slot may be written again.
            let slot = (wc.wr_id & 0xffff) as usize;
            if let Some(w) = slot.checked_sub(RECVS).and_then(|i| self.slot_wr.get_mut(i)) {
                if *w == Some(wc.wr_id) {
                    *w = None;
                }
            }
        }
        if wc.status != sys::ibv_wc_status::IBV_WC_SUCCESS {
            return Ok(Some(Completion::Failed { status: wc.status, recv, wr_id: wc.wr_id }));
        }
        Ok(Some(if recv {
            let (slot, len) = ((wc.wr_id & 0xffff) as usize, wc.byte_len as usize);
            let invalidated = if wc.wc_flags & IBV_WC_WITH_INV != 0 {
                // SAFETY: with IBV_WC_WITH_INV the union holds the rkey.
                Some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey })
            } else {
                None
            };
            if invalidated.is_some() && !self.active {
                // The client advertises nothing of ours to invalidate, and a
                // responder of its (backward replies) may use only plain
                // Send when we did not offer Send With Invalidate (RFC 8797
                // section 4.1; we never do).
                self.log.line("recv Send With Invalidate: the client must use plain Sends");
            }
            if !self.active {
                self.count_arrival(slot, len);
            }
            Completion::Recv { slot, len, invalidated }
        } else {
            Completion::Sent { wr_id: wc.wr_id }
        }))
    }

    /// Pulls the bytes of `segs` (a call's Read chunk) out of the client's
    /// memory with RDMA Reads, in order, and returns them.
    pub fn read_remote(&mut self, segs: &[Remote]) -> io::Result<Vec<u8>> {
        let total: usize = segs.iter().map(|s| s.len as usize).sum();
        if total > READ_AREA {
            return Err(io::Error::other(format!("Read chunk of {total} bytes is over {READ_AREA}")));
        }
        if segs.is_empty() {
            return Ok(Vec::new());
        }
        let at = (RECVS + SENDS) * SLOT + WRITE_AREA;
        let lkey = self.lkey();
        let base = self.buf[at..].as_ptr() as u64;
        let mut sges = Vec::with_capacity(segs.len());
        let mut off = 0u64;
        for s in segs {
            sges.push(sys::ibv_sge { addr: base + off, length: s.len, lkey });
            off += u64::from(s.len);
        }
        // SAFETY: all zeroes is a valid send WR.
        let mut wrs: Vec<sys::ibv_send_wr> = segs.iter().map(|_| unsafe { mem::zeroed() }).collect();
        let n = wrs.len();
        for i in 0..n {
            let next: *mut sys::ibv_send_wr = if i + 1 < n { &mut wrs[i + 1] } else { ptr::null_mut() };
            let w = &mut wrs[i];
            w.wr_id = if i + 1 == n { WR_READ } else { 0 };
            w.sg_list = &mut sges[i];
            w.num_sge = 1;
            w.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_READ;
            w.send_flags = if i + 1 == n { sys::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
            w.wr.rdma = sys::rdma_t { remote_addr: segs[i].addr, rkey: segs[i].rkey };
            w.next = next;
        }
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is valid; the chain and its SGEs live until the
        // last Read completed (waited for below) and describe registered
        // memory the connection owns.
        if unsafe { sys::ibv_post_send(self.qp(), wrs.as_mut_ptr(), &mut bad) } != 0 {
            return Err(os_err("ibv_post_send (RDMA Read)"));
        }
        self.wait_for(WR_READ)?;
        Ok(self.buf[at..at + total].to_vec())
    }

    /// Sends `msg`, as Send With Invalidate of `invalidate` if given.
    pub fn send(&mut self, msg: &[u8], invalidate: Option<u32>) -> io::Result<()> {
        self.send_chain(msg, invalidate, &[], false)
    }

    /// Sends `msg` after RDMA Writes of each `(data, destination)` in
    /// `writes`, in one chain (the QP orders them: the data is placed
    /// before the client sees the Send). With `wait`, returns once the
    /// Send completed, so the buffers may be reused at once.
    pub fn send_chain(&mut self, msg: &[u8], invalidate: Option<u32>, writes: &[(&[u8], Remote)], wait: bool) -> io::Result<()> {
        // What arrived before this Send is counted before it answers
        // anything (an OPTIONAL is done with by the next answer only).
        self.drain()?;
        let slot = RECVS + self.next_send % SENDS;
        // Unique per Send: several Sends share a slot, and waiting for the
        // slot number could match an older Send and return too early.
        let wr_id = ((self.next_send as u64) << 34) | slot as u64;
        self.next_send += 1;
        // The device may still be reading the slot for the last Send from
        // it (an RNR wait, a slow responder): not overwritten before that
        // Send completed.
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.slot_wr[slot - RECVS].is_some() {
            match self.poll_cq()? {
                Some(c) => self.stash.push_back(c),
                None if Instant::now() > deadline => return Err(io::Error::other("a Send did not complete in 120 s")),
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        let n = msg.len().min(SLOT);
        self.buf[slot * SLOT..slot * SLOT + n].copy_from_slice(&msg[..n]);
        let lkey = self.lkey();
        let mut sge = sys::ibv_sge { addr: self.buf[slot * SLOT..].as_ptr() as u64, length: n as u32, lkey };
        // SAFETY: all zeroes is a valid send WR.
        let mut wr: sys::ibv_send_wr = unsafe { mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        match invalidate {
            Some(rkey) => {
                wr.opcode = sys::ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            }
            None => wr.opcode = sys::ibv_wr_opcode::IBV_WR_SEND,
        }
        // The writes' data, one after another in the write area.
        let at = (RECVS + SENDS) * SLOT;
        let mut used = 0usize;
        let mut wsges = Vec::with_capacity(writes.len());
        for (data, _) in writes {
            if used + data.len() > WRITE_AREA {
                return Err(io::Error::other("RDMA Write data over the write area"));
            }
            self.buf[at + used..at + used + data.len()].copy_from_slice(data);
            wsges.push(sys::ibv_sge { addr: self.buf[at + used..].as_ptr() as u64, length: data.len() as u32, lkey });
            used += data.len();
        }
        // SAFETY: all zeroes is a valid send WR.
        let mut wwrs: Vec<sys::ibv_send_wr> = writes.iter().map(|_| unsafe { mem::zeroed() }).collect();
        let k = wwrs.len();
        for i in 0..k {
            let next: *mut sys::ibv_send_wr = if i + 1 < k { &mut wwrs[i + 1] } else { &mut wr };
            let w = &mut wwrs[i];
            w.wr_id = u64::MAX;
            w.sg_list = &mut wsges[i];
            w.num_sge = 1;
            w.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            w.wr.rdma = sys::rdma_t { remote_addr: writes[i].1.addr, rkey: writes[i].1.rkey };
            w.next = next;
        }
        let first: *mut sys::ibv_send_wr = if k > 0 { wwrs.as_mut_ptr() } else { &mut wr };
        // Counted before the client can see it.
        self.credits.send(credits::outbound(&msg[..n]));
        let mut bad = ptr::null_mut();
        // SAFETY: the QP is valid; the chain and its SGEs live for the call
        // and describe registered memory the connection owns.
        if unsafe { sys::ibv_post_send(self.qp(), first, &mut bad) } != 0 {
            return Err(os_err("ibv_post_send"));
        }
        self.slot_wr[slot - RECVS] = Some(wr_id);
        if wait {
            self.wait_for(wr_id)?;
        }
        Ok(())
    }

    /// Disconnects (the client sees DISCONNECTED; our QP flushes).
    pub fn disconnect(&self) {
        // SAFETY: the id is connected or disconnecting; harmless otherwise.
        unsafe { sys::rdma_disconnect(self.id) };
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // SAFETY: each object was created in `setup` (the id and channel
        // in `connect`, or the listener's) and is released once,
        // QP first (it uses the CQ, PD and MR).
        unsafe {
            if self.qp_created {
                sys::rdma_destroy_qp(self.id);
            }
            if !self.mr.is_null() {
                sys::ibv_dereg_mr(self.mr);
            }
            if !self.cq.is_null() {
                sys::ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                sys::ibv_dealloc_pd(self.pd);
            }
            sys::rdma_destroy_id(self.id);
            if !self.ch.is_null() {
                sys::rdma_destroy_event_channel(self.ch);
            }
        }
    }
}
