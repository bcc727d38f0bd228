// SPDX-License-Identifier: GPL-2.0

//! A loopback self-test of what the verbs layer offers a server, run on a
//! local RDMA device (write its IPv4 address to the `verbs_selftest`
//! module parameter):
//!
//! 1. a listener accepts a connection from an active endpoint on the same
//!    address ([`Listener`], [`Connection::accept`]);
//! 2. the active side registers two pages (one the peer may write, one it
//!    may read) and sends their segments; the second registration finds
//!    no region idle and asks for more ([`Connection::take_mrs_wanted`]),
//!    and a region registered and given back unposted is the caller's own
//!    release, which does not make it retry ([`Connection::released_since`]);
//! 3. the passive side holds that Receive ([`Received::hold`]), reads the
//!    segments from it, RDMA-Writes a pattern into the first page and
//!    RDMA-Reads the second ([`Connection::rdma_rw`]), releases the held
//!    Receive and answers with Send With Invalidate of the first page's
//!    rkey ([`Connection::send_invalidating`]);
//! 4. the active side sees the remote invalidation, invalidates the rest
//!    (one LOCAL_INV), finds the pattern in its page, and sends once more:
//!    the passive side has a single Receive buffer, so that message only
//!    arrives if releasing the held Receive reposted it.

use core::sync::atomic::{AtomicBool, Ordering};

use kernel::{
    alloc::flags::GFP_KERNEL,
    error::{code::EIO, Error, Result},
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use super::{
    Acceptor, CmEvent, Completion, ConnHandler, Connection, HeldRecv, Incoming, Listener, Live, QpConfig, QpSizes,
    Received, RecvCache, Registered, Registration, RwDir, SgWriter, VerbsCounters,
};
use crate::kapi::{
    errno,
    net::{Net, SockAddrBuf},
    page::OwnedPage,
    time,
};

/// The self-test's own counters (it is not a transport).
static COUNTERS: VerbsCounters = VerbsCounters::new();

/// The port the passive side listens on.
const PORT: u16 = 20_099;

/// How long any one step may take.
const STEP_MS: u32 = 10_000;

/// Bytes moved by each RDMA operation.
const LEN: usize = 64;

/// What one side has seen.
#[derive(Default)]
struct Seen {
    addr_resolved: bool,
    route_resolved: bool,
    established: bool,
    failed: Option<i32>,
    msgs: u32,
    last: [u8; 32],
    invalidated: Option<u32>,
    held: Option<HeldRecv>,
}

/// One side's handler.
#[pin_data]
struct Side {
    #[pin]
    seen: SpinLock<Seen>,
    #[pin]
    changed: CondVar,
    /// Hold the first Receive (the passive side).
    hold_first: bool,
    /// A completion failed.
    broken: AtomicBool,
}

impl Side {
    fn new(hold_first: bool) -> impl PinInit<Self> {
        pin_init!(Side {
            seen <- new_spinlock!(Seen::default(), "rpcrdma_rs:selftest"),
            changed <- new_condvar!("rpcrdma_rs:selftest"),
            hold_first,
            broken: AtomicBool::new(false),
        })
    }

    fn update(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock());
        self.changed.notify_all();
    }

    /// Waits until `done` holds; fails if the connection failed or the
    /// step took too long.
    fn wait(&self, step: &str, done: impl Fn(&Seen) -> bool) -> Result {
        let mut left = time::ms_to_jiffies(STEP_MS);
        let mut g = self.seen.lock();
        loop {
            if let Some(e) = g.failed {
                pr_err!("verbs self-test: {}: connection failed ({})\n", step, e);
                return Err(Error::from_errno(e));
            }
            if self.broken.load(Ordering::Relaxed) {
                pr_err!("verbs self-test: {}: a work request failed\n", step);
                return Err(EIO);
            }
            if done(&g) {
                return Ok(());
            }
            if left == 0 {
                pr_err!("verbs self-test: {}: timed out\n", step);
                return Err(errno::ETIMEDOUT());
            }
            time::wait_timeout(&self.changed, &mut g, &mut left)?;
        }
    }
}

impl ConnHandler for Side {
    fn cm_event(&self, event: CmEvent<'_>) {
        self.update(|s| match event {
            CmEvent::AddrResolved => s.addr_resolved = true,
            CmEvent::RouteResolved => s.route_resolved = true,
            CmEvent::Established(_) => s.established = true,
            CmEvent::AddrError(e)
            | CmEvent::RouteError(e)
            | CmEvent::Rejected(e, _)
            | CmEvent::Unreachable(e)
            | CmEvent::ConnectError(e) => s.failed = Some(if e < 0 { e } else { EIO.to_errno() }),
            _ => {}
        });
    }

    fn received(&self, _conn: Live<'_, Self>, msg: Received<'_>) {
        let mut s = self.seen.lock();
        let n = msg.data.len().min(s.last.len());
        s.last = [0; 32];
        if let (Some(dst), Some(src)) = (s.last.get_mut(..n), msg.data.get(..n)) {
            dst.copy_from_slice(src);
        }
        s.invalidated = msg.invalidated_rkey;
        s.msgs += 1;
        if self.hold_first && s.msgs == 1 {
            s.held = Some(msg.hold());
        }
        drop(s);
        self.changed.notify_all();
    }

    fn receive_failed(&self, status: u32) {
        pr_err!("verbs self-test: a Receive or registration failed (status {})\n", status);
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn invalidate_failed(&self) {
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn queue_pair_flushed(&self) {
        pr_err!("verbs self-test: work flushed on a live connection\n");
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn send_done(&self, how: Completion) {
        if let Completion::Failed(status) = how {
            pr_err!("verbs self-test: a Send failed (status {})\n", status);
            self.broken.store(true, Ordering::Relaxed);
            self.changed.notify_all();
        }
    }

    fn probe_done(&self, _how: Completion) {}

    fn counters(&self) -> &'static VerbsCounters {
        &COUNTERS
    }
}

/// The passive side's acceptor: keeps the one connection it accepts.
#[pin_data]
struct Server {
    side: Arc<Side>,
    cache: Arc<RecvCache>,
    #[pin]
    conn: SpinLock<Option<Arc<Connection<Side>>>>,
}

impl Acceptor for Server {
    fn request(&self, req: Incoming<'_>, _private_data: &[u8]) {
        // One Receive buffer: a second message arrives only if the held
        // one was released and reposted.
        let cfg = config(1);
        let accepted = Connection::accept(req, self.side.clone(), &self.cache, cfg, &[], 1)
            .and_then(|c| Ok(Arc::new(c, GFP_KERNEL)?));
        match accepted {
            Ok(c) => {
                let old = self.conn.lock().replace(c.clone());
                // Never dropped here: the lock holds at most this one, and
                // `c`'s other reference stays in the slot.
                drop(old);
                drop(c);
            }
            Err(e) => {
                pr_err!("verbs self-test: accept failed ({})\n", e.to_errno());
                self.side.update(|s| s.failed = Some(e.to_errno()));
            }
        }
    }
}

/// Queues for a test connection with `recv_bufs` Receives.
fn config(recv_bufs: usize) -> QpConfig {
    QpConfig {
        sizes: QpSizes {
            send_bufs: 4,
            send_buf_size: 256,
            send_sges: 2,
            recv_bufs,
            recv_batch: 1,
            recv_buf_size: 256,
            mrs: 1,
            max_mrs: 2,
            mr_pages: 1,
            send_wrs: 16,
        },
        signal_interval: 1,
    }
}

/// The bytes of pattern `seed`.
fn pattern(seed: u8) -> [u8; LEN] {
    let mut p = [0u8; LEN];
    for (i, b) in p.iter_mut().enumerate() {
        *b = seed ^ (i as u8).wrapping_mul(7);
    }
    p
}

/// Encodes two segments (handle, length, offset; big-endian).
fn encode(buf: &mut [u8], segs: [&Registered; 2]) -> Result<usize> {
    let mut at = 0;
    for s in segs {
        for field in [&s.handle.to_be_bytes()[..], &s.length.to_be_bytes()[..], &s.offset.to_be_bytes()[..]] {
            copy_in(buf.get_mut(at..).ok_or(EIO)?, field)?;
            at += field.len();
        }
    }
    Ok(at)
}

/// Decodes what [`encode`] wrote: (handle, offset) of each segment.
fn decode(bytes: &[u8]) -> Option<[(u32, u64); 2]> {
    let seg = |at: usize| -> Option<(u32, u64)> {
        let h = u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        let off = u64::from_be_bytes(bytes.get(at + 8..at + 16)?.try_into().ok()?);
        Some((h, off))
    };
    Some([seg(0)?, seg(16)?])
}

/// Runs the test on the local IPv4 address `addr` (network byte order).
pub(crate) fn run(net: &Net, addr: u32) -> Result {
    let cache = Arc::pin_init(RecvCache::new(&COUNTERS), GFP_KERNEL)?;
    let srv_side = Arc::pin_init(Side::new(true), GFP_KERNEL)?;
    let cli_side = Arc::pin_init(Side::new(false), GFP_KERNEL)?;
    let sa = SockAddrBuf::ipv4(addr, PORT);
    let (side, srv_cache) = (srv_side.clone(), cache.clone());
    let server = pin_init!(Server {
        side,
        cache: srv_cache,
        conn <- new_spinlock!(None, "rpcrdma_rs:selftest_conn"),
    });
    let listener = Listener::new(net, sa.addr(), 4, server).inspect_err(|e| {
        pr_err!("verbs self-test: cannot listen ({})\n", e.to_errno());
    })?;
    let mut cli = Connection::new(net, cli_side.clone(), &cache)?;
    let result = exchange(&mut cli, &listener, &sa, &cli_side, &srv_side);
    // Teardown: both ends, then the listener.
    drop(cli);
    let srv = listener.acceptor().conn.lock().take();
    drop(srv);
    drop(listener);
    match &result {
        Ok(()) => pr_info!("verbs self-test passed: accept, RDMA Write and Read, Send With Invalidate, held Receive\n"),
        Err(e) => pr_err!("verbs self-test failed ({})\n", e.to_errno()),
    }
    result
}

/// The second registration of step 2. The queue pair came with one region
/// and room for two: the registration finds none idle, and succeeds once
/// [`Connection::grow_mrs`] made the other (and no third).
fn second_region(cli: &Connection<Side>, reg: &mut Registration, page: &OwnedPage) -> Result<Registered> {
    let fill = |sg: &mut SgWriter<'_>| sg.push(page.page_ref(), LEN as u32, 0);
    match cli.register(reg, true, 1, fill) {
        Err(e) if e == errno::ENOBUFS() => {}
        _ => return Err(EIO),
    }
    // The failure asks for regions, once.
    if !cli.take_mrs_wanted() || cli.take_mrs_wanted() {
        return Err(EIO);
    }
    if !cli.mrs_exhausted() || cli.grow_mrs(4)? != 1 || cli.mrs_exhausted() {
        return Err(EIO);
    }
    cli.register(reg, true, 1, fill)
}

/// Steps 2 to 4 of the test (see the module's documentation).
fn exchange(
    cli: &mut Connection<Side>,
    listener: &Listener<Server>,
    sa: &SockAddrBuf,
    cli_side: &Side,
    srv_side: &Side,
) -> Result {
    let srv = connect(cli, listener, sa, cli_side, srv_side)?;

    // The active side offers a page to write and one to read.
    let wpage = OwnedPage::new()?;
    let rpage = OwnedPage::new()?;
    rpage.write(0, &pattern(0xa5))?;
    // A region registered and given back unposted: the caller's own
    // release, which its reading of the release count takes in.
    let mut epoch = cli.release_epoch();
    let mut reg = Registration::empty();
    cli.register(&mut reg, false, 1, |sg| sg.push(wpage.page_ref(), LEN as u32, 0))?;
    let _ = cli.release_unposted(reg, &mut epoch);
    if cli.released_since(&epoch) {
        return step_ok("own releases", Err(EIO));
    }
    let mut reg = Registration::empty();
    let w = cli.register(&mut reg, false, 1, |sg| sg.push(wpage.page_ref(), LEN as u32, 0))?;
    let r = match second_region(cli, &mut reg, &rpage) {
        Ok(r) => r,
        Err(e) => {
            let _ = cli.release_unposted(reg, &mut epoch);
            return step_ok("make a region on demand", Err(e));
        }
    };
    let (posted, sent) = match cli.send(reg, |out| out.copy(|buf| encode(buf, [&w, &r]))) {
        Ok(p) => p,
        Err(f) => {
            let _ = cli.release_unposted(f.reg, &mut epoch);
            return step_ok("send segments", Err(f.err));
        }
    };
    let _done = cli.wait_sent(sent);

    // The passive side holds the Receive and moves data.
    srv_side.wait("receive segments", |s| s.held.is_some())?;
    let held = srv_side.seen.lock().held.take().ok_or(EIO)?;
    let segs = srv.with_held(&held, decode).flatten().ok_or(EIO)?;
    let spage = OwnedPage::new()?;
    spage.write(0, &pattern(0x3c))?;
    step_ok("RDMA Write", srv.rdma_rw(RwDir::Write, &[(spage.page_ref(), 0, LEN as u32)], segs[0].1, segs[0].0))?;
    let dpage = OwnedPage::new()?;
    step_ok("RDMA Read", srv.rdma_rw(RwDir::Read, &[(dpage.page_ref(), 0, LEN as u32)], segs[1].1, segs[1].0))?;
    let mut got = [0u8; LEN];
    dpage.read(0, &mut got)?;
    if got != pattern(0xa5) {
        pr_err!("verbs self-test: RDMA Read brought the wrong bytes\n");
        return Err(EIO);
    }
    srv.release_held(held);
    let sent = step_ok("answer", srv.send_invalidating(segs[0].0, |out| out.copy(|b| copy_in(b, b"done"))))?;
    let _done = srv.wait_sent(sent);

    // The active side sees the remote invalidation and the written bytes.
    cli_side.wait("answer", |s| s.msgs >= 1)?;
    let invalidated = cli_side.seen.lock().invalidated;
    if invalidated != Some(w.handle) {
        pr_err!("verbs self-test: answer invalidated {:?}, not {:#x}\n", invalidated, w.handle);
        return Err(EIO);
    }
    let (_proof, local) = cli.invalidate(posted, invalidated);
    if local != 1 {
        pr_err!("verbs self-test: {} LOCAL_INVs, not 1\n", local);
        return Err(EIO);
    }
    wpage.read(0, &mut got)?;
    if got != pattern(0x3c) {
        pr_err!("verbs self-test: RDMA Write left the wrong bytes\n");
        return Err(EIO);
    }

    // The released Receive was reposted: one more message arrives.
    let sent = step_ok("send again", cli.send_unregistered(|out| out.copy(|b| copy_in(b, b"again"))))?;
    let _done = cli.wait_sent(sent);
    srv_side.wait("message after release", |s| s.msgs >= 2)?;
    if srv_side.seen.lock().last.get(..5) != Some(b"again".as_slice()) {
        return Err(EIO);
    }
    Ok(())
}

/// Connects `cli` to `listener` at `sa`; returns the passive end.
fn connect(
    cli: &mut Connection<Side>,
    listener: &Listener<Server>,
    sa: &SockAddrBuf,
    cli_side: &Side,
    srv_side: &Side,
) -> Result<Arc<Connection<Side>>> {
    step_ok("resolve address", cli.resolve_addr(sa.addr(), STEP_MS))?;
    cli_side.wait("resolve address", |s| s.addr_resolved)?;
    step_ok("resolve route", cli.resolve_route(STEP_MS))?;
    cli_side.wait("resolve route", |s| s.route_resolved)?;
    step_ok("create queue pair", cli.create_qp(config(2)))?;
    step_ok("connect", cli.connect(&[], 1))?;
    cli_side.wait("connect", |s| s.established)?;
    srv_side.wait("accept", |s| s.established)?;
    listener.acceptor().conn.lock().clone().ok_or(EIO)
}

/// Logs a failed step.
fn step_ok<T>(step: &str, r: Result<T>) -> Result<T> {
    r.inspect_err(|e| pr_err!("verbs self-test: {}: {}\n", step, e.to_errno()))
}

/// Copies `src` to the front of `buf`.
fn copy_in(buf: &mut [u8], src: &[u8]) -> Result<usize> {
    buf.get_mut(..src.len()).ok_or(EIO)?.copy_from_slice(src);
    Ok(src.len())
}
