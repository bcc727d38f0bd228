// SPDX-License-Identifier: GPL-2.0

//! A loopback self-test of what the verbs layer offers a server, run on a
//! local RDMA device (write its IPv4 address to the `verbs_selftest`
//! module parameter; on soft-RoCE and on soft-iWARP, whose RDMA Read
//! sinks must be registered, which the R/W API does with the queue pair's
//! MR pool):
//!
//! 1. a listener gets a connection request from an active endpoint on the
//!    same address, and the test accepts it from its own thread, outside
//!    the CM's handler ([`Listener`], [`ConnRequest`],
//!    [`Connection::accept`]);
//! 2. the active side registers four pages: two the peer may write, two
//!    it may read (the second registration finds no region idle and asks
//!    for more: [`Connection::take_mrs_wanted`]); a region holds a
//!    reference of its page while registered, a lender has one token at a
//!    time and no proof while it is out, and another connection's release
//!    of the token hands it back; it sends the four segments;
//! 3. the passive side holds that Receive ([`Received::hold`]), reads the
//!    segments from it (another connection cannot), RDMA-Reads the two
//!    readable pages into two of its own in one operation of two segments
//!    ([`Connection::rw_prepare`], [`Connection::rw_post`],
//!    [`Connection::rw_wait`]), then again into pages the operation owns,
//!    as two chunks, one of two segments ([`Connection::rw_prepare_read`],
//!    [`Connection::rw_wait_filled`]; segments short of their chunk, or
//!    past the chunks, are refused), releases the held Receive and answers with
//!    RDMA Writes of two patterns into the two writable pages chained
//!    ahead of a Send With Invalidate of the first one's rkey, one post
//!    ([`Connection::send_after_writes`]), whose completion destroys the
//!    writes (no R/W operation is left);
//! 4. the active side sees the remote invalidation, invalidates the rest
//!    (three LOCAL_INVs), finds the patterns in its pages, and sends once
//!    more: the passive side has a single Receive buffer, so that message
//!    only arrives if releasing the held Receive reposted it;
//! 5. tokens lost, one before and one after its Send: their pages keep
//!    the references their regions took until the connection's teardown;
//! 6. an R/W operation the device takes only in part (a test hook posts it
//!    without its last work request): the post fails, the queue pair is
//!    flushed, and the operation comes back to be destroyed, letting its
//!    pages go.

use core::sync::atomic::{AtomicBool, Ordering};

use kernel::{
    alloc::flags::GFP_KERNEL,
    error::{code::{EBUSY, EINVAL, EIO}, Error, Result},
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use super::{
    Acceptor, CmEvent, Completion, ConnHandler, ConnRequest, Connection, Copying, HeldRecv, InFlight, Lender, Listener,
    Live, Mapping, QpConfig, Received, Registered, Registration, RemoteInv, RwChunk, RwSeg, SendWriter, SgWriter,
    VerbsCounters,
};
use crate::kapi::{
    errno,
    net::{Net, SockAddrBuf},
    page::{Dir, Inbound, OwnedPage, OwnedPages, Outbound},
    time,
};

/// A region's scatterlist of the first `LEN` bytes of `page`, which the
/// peer accesses in direction `D`.
fn page_sg<D: Dir>(page: &OwnedPage) -> impl FnOnce(&mut SgWriter<'_, D>) -> Result + Copy + '_ {
    move |sg: &mut SgWriter<'_, D>| sg.push(page.page_ref(), LEN as u32, 0)
}

/// The self-test's own counters (it is not a transport).
static COUNTERS: VerbsCounters = VerbsCounters::new();

/// The port the passive side listens on.
const PORT: u16 = 20_099;

/// How long any one step may take.
const STEP_MS: u32 = 10_000;

/// The active side's private data, which the passive side's request
/// carries.
const HELLO: &[u8] = b"rpcrdma_rs verbs self-test";

/// Bytes moved by each RDMA operation.
const LEN: usize = 64;

/// Pages a region covers.
const MR_PAGES: u32 = 4;

/// Pages of the run [`run_refs`] registers.
const RUN_PAGES: usize = 3;

/// What one side has seen.
#[derive(Default)]
struct Seen {
    addr_resolved: bool,
    route_resolved: bool,
    established: bool,
    failed: Option<i32>,
    msgs: u32,
    last: [u8; 32],
    invalidated: Option<RemoteInv>,
    held: Option<HeldRecv>,
    requests: u32,
    /// Send completions (signalled, or flushed).
    sends_done: u32,
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
    /// Flushed work is expected now (step 6 breaks the connection).
    flush_expected: AtomicBool,
    /// Post the next R/W operation without its last work request.
    fail_rw_post: AtomicBool,
}

impl Side {
    fn new(hold_first: bool) -> impl PinInit<Self> {
        pin_init!(Side {
            seen <- new_spinlock!(Seen::default(), "rpcrdma_rs:selftest"),
            changed <- new_condvar!("rpcrdma_rs:selftest"),
            hold_first,
            broken: AtomicBool::new(false),
            flush_expected: AtomicBool::new(false),
            fail_rw_post: AtomicBool::new(false),
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
        s.invalidated = msg.invalidated;
        s.msgs += 1;
        if self.hold_first && s.msgs == 1 {
            s.held = Some(msg.hold());
        }
        drop(s);
        self.changed.notify_all();
    }

    fn receive_failed(&self, status: u32) {
        if self.flush_expected.load(Ordering::Relaxed) {
            return;
        }
        pr_err!("verbs self-test: a Receive or registration failed (status {})\n", status);
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn invalidate_failed(&self) {
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn queue_pair_flushed(&self) {
        if self.flush_expected.load(Ordering::Relaxed) {
            return;
        }
        pr_err!("verbs self-test: work flushed on a live connection\n");
        self.broken.store(true, Ordering::Relaxed);
        self.changed.notify_all();
    }

    fn send_done(&self, how: Completion) {
        self.seen.lock().sends_done += 1;
        self.changed.notify_all();
        if self.flush_expected.load(Ordering::Relaxed) {
            return;
        }
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

    fn inject_partial_rw_post(&self) -> bool {
        self.fail_rw_post.swap(false, Ordering::Relaxed)
    }
}

/// The passive side's acceptor: queues the one request it gets, which
/// the test accepts from its own thread (not from the CM's handler), and
/// keeps the connection.
#[pin_data]
struct Server {
    side: Arc<Side>,
    #[pin]
    req: SpinLock<Option<ConnRequest>>,
    #[pin]
    conn: SpinLock<Option<Arc<Connection<Side>>>>,
}

impl Acceptor for Server {
    fn request(&self, req: ConnRequest) {
        // Only the active side's request (its private data says so; the
        // CM pads it with zeroes); a second one replaces (and so refuses)
        // the first.
        if !req.private_data().starts_with(HELLO) {
            pr_err!("verbs self-test: a request with private data {:?}\n", req.private_data());
            return;
        }
        let old = self.req.lock().replace(req);
        self.side.update(|s| s.requests += 1);
        drop(old);
    }
}

impl Server {
    /// Accepts the queued request (one Receive buffer: a second message
    /// arrives only if the held one was released and reposted).
    fn accept(&self) -> Result<Arc<Connection<Side>>> {
        let req = self.req.lock().take().ok_or(EIO)?;
        let c = match Connection::accept(req, self.side.clone(), config(1), &[], 1) {
            Ok(c) => Arc::new(c, GFP_KERNEL)?,
            Err((e, req)) => {
                pr_err!("verbs self-test: accept failed ({})\n", e.to_errno());
                // Dropped: refused.
                drop(req);
                return Err(e);
            }
        };
        *self.conn.lock() = Some(c.clone());
        Ok(c)
    }
}

/// Queues for a test connection with `recv_bufs` Receives.
fn config(recv_bufs: usize) -> QpConfig {
    QpConfig {
        send_bufs: 4,
        send_buf_size: 256,
        send_sges: 2,
        recv_bufs,
        recv_batch: 1,
        recv_buf_size: 256,
        mrs: 1,
        max_mrs: 4,
        mr_pages: MR_PAGES,
        send_wrs: 32,
        max_send_regs: 4,
        rdma_ctxs: 4,
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

/// Segments the active side offers: two to write, two to read.
const SEGS: usize = 4;

/// Encodes the segments (handle, length, offset; big-endian).
fn encode(buf: &mut [u8], segs: &[Registered]) -> Result<usize> {
    let mut at = 0;
    for s in segs {
        for field in [&s.handle.to_be_bytes()[..], &s.length.to_be_bytes()[..], &s.offset.to_be_bytes()[..]] {
            copy_in(buf.get_mut(at..).ok_or(EIO)?, field)?;
            at += field.len();
        }
    }
    Ok(at)
}

/// Decodes segment `i` of what [`encode`] wrote: (handle, offset).
fn decode_seg(bytes: &[u8], i: usize) -> Option<(u32, u64)> {
    let at = i * 16;
    let h = u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
    let off = u64::from_be_bytes(bytes.get(at + 8..at + 16)?.try_into().ok()?);
    Some((h, off))
}

/// Decodes what [`encode`] wrote of the four segments.
fn decode(bytes: &[u8]) -> Option<[(u32, u64); SEGS]> {
    Some([decode_seg(bytes, 0)?, decode_seg(bytes, 1)?, decode_seg(bytes, 2)?, decode_seg(bytes, 3)?])
}

/// Runs the test on the local IPv4 address `addr` (network byte order).
pub(crate) fn run(net: &Net, addr: u32) -> Result {
    let srv_side = Arc::pin_init(Side::new(true), GFP_KERNEL)?;
    let cli_side = Arc::pin_init(Side::new(false), GFP_KERNEL)?;
    let sa = SockAddrBuf::ipv4(addr, PORT);
    let side = srv_side.clone();
    let server = pin_init!(Server {
        side,
        req <- new_spinlock!(None, "rpcrdma_rs:selftest_req"),
        conn <- new_spinlock!(None, "rpcrdma_rs:selftest_conn"),
    });
    let listener = Listener::new(net, sa.addr(), 4, server).inspect_err(|e| {
        pr_err!("verbs self-test: cannot listen ({})\n", e.to_errno());
    })?;
    let mut cli = Connection::new(net, cli_side.clone())?;
    let lost = OwnedPage::new()?;
    let refs = lost.ref_count();
    let mut result = exchange(&mut cli, &listener, &sa, &cli_side, &srv_side, &lost);
    let dev = cli.device_name();
    // Teardown: both ends, then the listener. The client's teardown frees
    // the region of the lost token, and with it its page reference.
    drop(cli);
    if result.is_ok() && lost.ref_count() != refs {
        pr_err!("verbs self-test: the lost token's page kept {} references after teardown\n", lost.ref_count());
        result = Err(EIO);
    }
    let srv = listener.acceptor().conn.lock().take();
    drop(srv);
    drop(listener);
    match &result {
        Ok(()) => pr_info!(
            "verbs self-test passed on {}: accept outside the CM handler, a two-segment RDMA Read, two RDMA Writes chained ahead of a Send With Invalidate, held Receive, page references, tokens, a closed lender, a partial R/W post\n",
            dev
        ),
        Err(e) => pr_err!("verbs self-test failed ({})\n", e.to_errno()),
    }
    result
}

/// The second registration of step 2. The queue pair came with one region
/// and room for four: the registration finds none idle, and succeeds once
/// [`Connection::grow_mrs`] made the other three (and no fourth).
fn second_region(cli: &Connection<Side>, reg: &mut Registration, page: &OwnedPage) -> Result<Registered> {
    let fill = page_sg::<Inbound>(page);
    match cli.register(reg, 1, fill) {
        Err(e) if e == errno::ENOBUFS() => {}
        _ => return Err(EIO),
    }
    // The failure asks for regions, once.
    if !cli.take_mrs_wanted() || cli.take_mrs_wanted() {
        return Err(EIO);
    }
    if !cli.mrs_exhausted() || cli.grow_mrs(4)? != 3 || cli.mrs_exhausted() {
        return Err(EIO);
    }
    cli.register(reg, 1, fill)
}

/// Registers the four pages into `reg`: the two to write, then the two to
/// read.
fn register_all(cli: &Connection<Side>, reg: &mut Registration, pages: &[OwnedPage; SEGS]) -> Result<[Registered; SEGS]> {
    let [w1, w2, r1, r2] = pages;
    let a = cli.register::<Inbound>(reg, 1, page_sg(w1))?;
    let b = second_region(cli, reg, w2)?;
    let c = cli.register::<Outbound>(reg, 1, page_sg(r1))?;
    let d = cli.register::<Outbound>(reg, 1, page_sg(r2))?;
    Ok([a, b, c, d])
}

/// Pages in a row registered in one call ([`SgWriter::push_run`]): each
/// holds a reference of the region's while registered, given back with
/// it; a run the region has no room for takes none.
fn run_refs(cli: &Connection<Side>, lender: &Lender) -> Result {
    let run = OwnedPages::new(RUN_PAGES)?;
    let counts = || -> [i32; RUN_PAGES] { core::array::from_fn(|i| run.page(i).map_or(0, |p| p.ref_count())) };
    let before = counts();
    // From byte 100 of the first page to byte 99 of the third.
    let len = 2 * crate::kapi::PAGE_SIZE;
    let mut reg = cli.begin(lender)?;
    let pushed = cli.register::<Inbound>(&mut reg, 1, |sg: &mut SgWriter<'_, Inbound>| sg.push_run(run.run(), 100, len));
    let registered = counts();
    let released = cli.release_unposted(lender, reg);
    let after = counts();
    let held = registered.iter().zip(before).all(|(r, b)| *r == b + 1);
    if pushed.map(|seg| seg.length) != Ok(len) || !matches!(released, Ok((_, 1))) || !held || after != before {
        pr_err!("verbs self-test: a run's page references {:?} registered, {:?} released (from {:?})\n", registered, after, before);
        return Err(EIO);
    }
    // Four pages and a byte: one page more than a region takes.
    let big = OwnedPages::new(MR_PAGES as usize + 1)?;
    let before = big.page(0).map_or(0, |p| p.ref_count());
    let mut reg = cli.begin(lender)?;
    let long = MR_PAGES * crate::kapi::PAGE_SIZE + 1;
    let pushed = cli.register::<Inbound>(&mut reg, 1, |sg: &mut SgWriter<'_, Inbound>| sg.push_run(big.run(), 0, long));
    let released = cli.release_unposted(lender, reg);
    if pushed.is_ok() || !matches!(released, Ok((_, 0))) || big.page(0).map_or(0, |p| p.ref_count()) != before {
        pr_err!("verbs self-test: a run longer than a region was taken\n");
        return Err(EIO);
    }
    Ok(())
}

/// Steps 2 to 5 of the test (see the module's documentation).
fn exchange(
    cli: &mut Connection<Side>,
    listener: &Listener<Server>,
    sa: &SockAddrBuf,
    cli_side: &Side,
    srv_side: &Side,
    lost: &OwnedPage,
) -> Result {
    let srv = connect(cli, listener, sa, cli_side, srv_side)?;

    // Two pages the peer writes, two it reads.
    let pages = [OwnedPage::new()?, OwnedPage::new()?, OwnedPage::new()?, OwnedPage::new()?];
    pages[2].write(0, &pattern(0xa5))?;
    pages[3].write(0, &pattern(0x5a))?;
    let lender = Lender::new();
    // A region registered and given back unposted. While registered, the
    // region holds a reference of the page of its own.
    let refs = pages[0].ref_count();
    let mut reg = cli.begin(&lender)?;
    cli.register::<Inbound>(&mut reg, 1, page_sg(&pages[0]))?;
    let registered_refs = pages[0].ref_count();
    if !matches!(cli.release_unposted(&lender, reg), Ok((_, 1))) {
        return step_ok("give back unposted", Err(EIO));
    }
    if registered_refs != refs + 1 || pages[0].ref_count() != refs {
        pr_err!("verbs self-test: page references {} registered, {} released (from {})\n", registered_refs, pages[0].ref_count(), refs);
        return Err(EIO);
    }
    run_refs(cli, &lender)?;
    // One token of a lender at a time.
    let reg = cli.begin(&lender)?;
    if cli.begin(&lender).is_ok() {
        pr_err!("verbs self-test: a second token of a lender\n");
        return Err(EIO);
    }
    if cli.release_unposted(&lender, reg).is_err() || lender.released_idle().is_none() {
        return Err(EIO);
    }
    step_ok("send_one refusals", send_one_refused(cli, &lender, &pages[0]))?;
    // A token is its own connection's: another neither registers into
    // it, posts it nor gives it back.
    step_ok("foreign token", foreign_token(cli, &srv, &lender, &pages[0]))?;
    let mut reg = cli.begin(&lender)?;
    let segs = match register_all(cli, &mut reg, &pages) {
        Ok(s) => s,
        Err(e) => {
            let _ = cli.release_unposted(&lender, reg);
            return step_ok("register", Err(e));
        }
    };
    let posted = match cli.send(reg, |out: &mut SendWriter<'_, Mapping>| out.copy(|buf| encode(buf, &segs))) {
        Ok(p) => p,
        Err(f) => {
            let _ = cli.release_unposted(&lender, f.reg);
            return step_ok("send segments", Err(f.err));
        }
    };
    // No proof while the token is out, and none from a connection that is
    // not the token's.
    if lender.released_idle().is_some() {
        return Err(EIO);
    }
    let posted = match srv.release(&lender, posted, None) {
        Ok(_) => {
            pr_err!("verbs self-test: another connection's token gave a proof\n");
            return Err(EIO);
        }
        Err(t) => t,
    };
    // From here on, whatever fails, the token is ended before its pages
    // can go.
    let result = serve_and_check(cli, &srv, srv_side, cli_side, segs[0].handle);
    let invalidated = cli_side.seen.lock().invalidated;
    let (proof, local) = match cli.release(&lender, posted, invalidated) {
        Ok(r) => r,
        Err(_t) => {
            pr_err!("verbs self-test: the token of this lender and connection was refused\n");
            return Err(EIO);
        }
    };
    result?;
    // The proof closes its own lender only, which then lends nothing (a
    // request is completed meanwhile) until it is opened again.
    let proof = match Lender::new().close(proof) {
        Ok(_) => {
            pr_err!("verbs self-test: a proof closed another lender\n");
            return Err(EIO);
        }
        Err(p) => p,
    };
    let closed = lender.close(proof).map_err(|_| EIO)?;
    if cli.begin(&lender).is_ok() || lender.released_idle().is_some() {
        pr_err!("verbs self-test: a closed lender lent\n");
        return Err(EIO);
    }
    drop(closed);
    let reg = cli.begin(&lender)?;
    if cli.release_unposted(&lender, reg).is_err() {
        return Err(EIO);
    }
    if local != SEGS - 1 {
        pr_err!("verbs self-test: {} LOCAL_INVs, not {}\n", local, SEGS - 1);
        return Err(EIO);
    }
    for (page, seed) in [(&pages[0], 0x3c), (&pages[1], 0xc3)] {
        let mut got = [0u8; LEN];
        page.read(0, &mut got)?;
        if got != pattern(seed) {
            pr_err!("verbs self-test: RDMA Write left the wrong bytes\n");
            return Err(EIO);
        }
    }

    // The released Receive was reposted: one more message arrives.
    step_ok("send again", cli.send_copied(|out: &mut SendWriter<'_, Copying>| out.copy(|b| copy_in(b, b"again"))))?;
    srv_side.wait("message after release", |s| s.msgs >= 2)?;
    if srv_side.seen.lock().last.get(..5) != Some(b"again".as_slice()) {
        return Err(EIO);
    }

    // A token lost: its region keeps its page (a reference of its own)
    // and its lender stays away, until the connection goes (`run` looks
    // at the page after).
    let refs = lost.ref_count();
    let orphan = Lender::new();
    let mut reg = cli.begin(&orphan)?;
    cli.register::<Inbound>(&mut reg, 2, page_sg(lost))?;
    // A token has no `Drop`: dropping it is forgetting it.
    drop(reg);
    if lost.ref_count() != refs + 1 || orphan.released_idle().is_some() {
        pr_err!("verbs self-test: a lost token's page has {} references (from {})\n", lost.ref_count(), refs);
        return Err(EIO);
    }
    // And one lost after its Send, with the region the peer may read: the
    // region is the peer's to read until teardown, and keeps its page.
    let posted_orphan = Lender::new();
    let mut reg = cli.begin(&posted_orphan)?;
    let seg = match cli.register::<Outbound>(&mut reg, 3, page_sg(lost)) {
        Ok(seg) => seg,
        Err(e) => {
            let _ = cli.release_unposted(&posted_orphan, reg);
            return step_ok("register lost", Err(e));
        }
    };
    match cli.send(reg, |out: &mut SendWriter<'_, Mapping>| out.copy(|b| encode(b, &[seg]))) {
        Ok(t) => drop(t),
        Err(f) => {
            let _ = cli.release_unposted(&posted_orphan, f.reg);
            return step_ok("send lost", Err(f.err));
        }
    }
    srv_side.wait("lost segment", |s| s.msgs >= 3)?;
    if lost.ref_count() != refs + 2 || posted_orphan.released_idle().is_some() {
        pr_err!("verbs self-test: a lost posted token's page has {} references (from {})\n", lost.ref_count(), refs);
        return Err(EIO);
    }
    let (h, off) = decode_seg(&srv_side.seen.lock().last, 0).ok_or(EIO)?;
    partial_rw_post(&srv, cli_side, srv_side, h, off)
}

/// Step 2's checks that a token is its connection's only: `srv`, the other
/// connection, cannot register a region into a token of `lender` on `cli`,
/// send it or give it back.
fn foreign_token(cli: &Connection<Side>, srv: &Connection<Side>, lender: &Lender, page: &OwnedPage) -> Result {
    let mut reg = cli.begin(lender)?;
    let registered = srv.register::<Inbound>(&mut reg, 1, page_sg(page));
    let result = match registered {
        Err(e) if e == EINVAL => Ok(()),
        Err(e) => {
            pr_err!("verbs self-test: another connection's registration failed with {}, not EINVAL\n", e.to_errno());
            Err(EIO)
        }
        Ok(_) => {
            pr_err!("verbs self-test: another connection registered into a token\n");
            Err(EIO)
        }
    };
    let reg = match srv.release_unposted(lender, reg) {
        Ok(_) => {
            pr_err!("verbs self-test: another connection gave an unposted token back\n");
            return Err(EIO);
        }
        Err(reg) => reg,
    };
    let reg = match srv.send(reg, |out: &mut SendWriter<'_, Mapping>| out.copy(|b| copy_in(b, b"foreign"))) {
        Ok(_t) => {
            pr_err!("verbs self-test: another connection posted a token\n");
            return Err(EIO);
        }
        Err(f) if f.err == EINVAL => f.reg,
        Err(f) => {
            pr_err!("verbs self-test: another connection's send failed with {}, not EINVAL\n", f.err.to_errno());
            let _ = cli.release_unposted(lender, f.reg);
            return Err(EIO);
        }
    };
    // Nothing was registered into it: no region comes back.
    match cli.release_unposted(lender, reg) {
        Ok((_, 0)) => result,
        _ => Err(EIO),
    }
}

/// Step 6: `srv` reads the peer's segment (`rkey`, `addr`) twice into two
/// pages of its own, one R/W operation the hook posts without its last
/// work request. The post must fail, and the operation come back whole:
/// destroyed, its pages are let go. The connection is broken after.
fn partial_rw_post(srv: &Connection<Side>, cli_side: &Side, srv_side: &Side, rkey: u32, addr: u64) -> Result {
    let sinks = [OwnedPage::new()?, OwnedPage::new()?];
    let refs = [sinks[0].ref_count(), sinks[1].ref_count()];
    let s1 = [(sinks[0].page_ref::<Inbound>(), 0, LEN as u32)];
    let s2 = [(sinks[1].page_ref::<Inbound>(), 0, LEN as u32)];
    let read = [RwSeg { rkey, addr, pages: &s1 }, RwSeg { rkey, addr, pages: &s2 }];
    let c = step_ok("prepare partial RDMA Read", srv.rw_prepare(&read, 0))?;
    if sinks[0].ref_count() != refs[0] + 1 || sinks[1].ref_count() != refs[1] + 1 {
        pr_err!("verbs self-test: an R/W operation holds {} references of its page (from {})\n", sinks[0].ref_count(), refs[0]);
        let _ = srv.rw_discard(c);
        return Err(EIO);
    }
    cli_side.flush_expected.store(true, Ordering::Relaxed);
    srv_side.flush_expected.store(true, Ordering::Relaxed);
    srv_side.fail_rw_post.store(true, Ordering::Relaxed);
    let c = match srv.rw_post(c) {
        Ok(p) => {
            pr_err!("verbs self-test: a partial R/W post succeeded\n");
            let _ = srv.rw_wait(p);
            return Err(EIO);
        }
        Err((_, c)) => c,
    };
    if srv.rw_discard(c).is_err() {
        pr_err!("verbs self-test: the R/W operation of a partial post could not be discarded\n");
        return Err(EIO);
    }
    if sinks[0].ref_count() != refs[0] || sinks[1].ref_count() != refs[1] {
        pr_err!("verbs self-test: a discarded R/W operation kept {} references of its page (from {})\n", sinks[0].ref_count(), refs[0]);
        return Err(EIO);
    }
    Ok(())
}

/// Step 3, and the active side's view of its answer: the passive side
/// holds the Receive, RDMA-Reads the two readable segments in one
/// operation, releases the held Receive, and answers with RDMA Writes of
/// two patterns into the two writable segments chained ahead of a Send
/// With Invalidate of the first one's rkey (`w_handle`).
fn serve_and_check(
    cli: &Connection<Side>,
    srv: &Connection<Side>,
    srv_side: &Side,
    cli_side: &Side,
    w_handle: u32,
) -> Result {
    srv_side.wait("receive segments", |s| s.held.is_some())?;
    let held = srv_side.seen.lock().held.take().ok_or(EIO)?;
    // Another connection's buffer is not this one's to read.
    if cli.with_held(&held, |_| ()).is_some() {
        pr_err!("verbs self-test: a held Receive read on another connection\n");
        return Err(EIO);
    }
    let segs = srv.with_held(&held, decode).flatten().ok_or(EIO)?;
    let [w1, w2, r1, r2] = segs;

    // The Read chunk: two segments into two sink pages, one operation.
    let sinks = [OwnedPage::new()?, OwnedPage::new()?];
    let s1 = [(sinks[0].page_ref::<Inbound>(), 0, LEN as u32)];
    let s2 = [(sinks[1].page_ref::<Inbound>(), 0, LEN as u32)];
    let read = [RwSeg { rkey: r1.0, addr: r1.1, pages: &s1 }, RwSeg { rkey: r2.0, addr: r2.1, pages: &s2 }];
    step_ok("RDMA Read", srv.rdma_rw(&read))?;
    for (page, seed) in [(&sinks[0], 0xa5), (&sinks[1], 0x5a)] {
        let mut got = [0u8; LEN];
        page.read(0, &mut got)?;
        if got != pattern(seed) {
            pr_err!("verbs self-test: RDMA Read brought the wrong bytes\n");
            return Err(EIO);
        }
    }
    read_owned(srv, r1, r2)?;
    step_ok("release held Receive", srv.release_held(held))?;

    // The Write chunk: two segments from two pages, chained ahead of the
    // answer, one post.
    let sources = [OwnedPage::new()?, OwnedPage::new()?];
    sources[0].write(0, &pattern(0x3c))?;
    sources[1].write(0, &pattern(0xc3))?;
    let p1 = [(sources[0].page_ref::<Outbound>(), 0, LEN as u32)];
    let p2 = [(sources[1].page_ref::<Outbound>(), 0, LEN as u32)];
    let write = [RwSeg { rkey: w1.0, addr: w1.1, pages: &p1 }, RwSeg { rkey: w2.0, addr: w2.1, pages: &p2 }];
    let writes = step_ok("prepare RDMA Writes", srv.rw_prepare(&write, 0))?;
    let sends = srv_side.seen.lock().sends_done;
    let done = |out: &mut SendWriter<'_, Copying>| out.copy(|b| copy_in(b, b"done"));
    if let Err((e, writes)) = srv.send_after_writes(writes, Some(w1.0), done) {
        if let Some(w) = writes {
            let _ = srv.rw_discard(w);
        }
        return step_ok("answer with writes", Err(e));
    }
    // The Send's completion destroys the writes: nothing is left of them
    // once it came (the wait times out otherwise).
    srv_side.wait("writes destroyed by the answer's completion", |s| s.sends_done > sends && srv.rw_live() == 0)?;

    // The active side sees the remote invalidation.
    cli_side.wait("answer", |s| s.msgs >= 1)?;
    let invalidated = cli_side.seen.lock().invalidated;
    if invalidated.map(|r| r.rkey()) != Some(w_handle) {
        pr_err!("verbs self-test: answer invalidated {:?}, not {:#x}\n", invalidated.map(|r| r.rkey()), w_handle);
        return Err(EIO);
    }
    Ok(())
}

/// Step 3's Read into pages of the operation's own
/// ([`Connection::rw_prepare_read`]): the peer's readable segments `r1`
/// and `r2` (rkey, address) as two chunks, the second cut into two
/// segments at an offset that is not a word's; the bytes must come back
/// whole, in each chunk's pages from their start, once
/// [`Connection::rw_wait_filled`] hands them over. Segments that do not
/// fill their chunk, or that no chunk counts, are refused, and leave no
/// operation behind.
fn read_owned(srv: &Connection<Side>, r1: (u32, u64), r2: (u32, u64)) -> Result {
    const CUT: u32 = 13;
    let n = LEN as u32;
    let short = [(r1.0, r1.1, n)];
    rw_refused(srv, "a Read short of its chunk", srv.rw_prepare_read(short.iter().copied(), &[(1, n + 4)], 0))?;
    let segs = [(r1.0, r1.1, n), (r2.0, r2.1, CUT), (r2.0, r2.1 + u64::from(CUT), n - CUT)];
    // Segments beyond the chunks' counts are refused too: no context may
    // be made over a range they did not set.
    rw_refused(srv, "a Read with segments past its chunks", srv.rw_prepare_read(segs.iter().copied(), &[(1, n)], 0))?;
    let c = step_ok("prepare RDMA Read into owned pages", srv.rw_prepare_read(segs.iter().copied(), &[(1, n), (2, n)], 0))?;
    let p = match srv.rw_post(c) {
        Ok(p) => p,
        Err((e, c)) => {
            let _ = srv.rw_discard(c);
            return step_ok("post RDMA Read into owned pages", Err(e));
        }
    };
    let mut filled: [Option<OwnedPages>; 2] = [None, None];
    match srv.rw_wait_filled(p, &mut filled) {
        Ok(Completion::Ok) => {}
        Ok(_) => return step_ok("RDMA Read into owned pages", Err(EIO)),
        Err(_p) => return Err(EINVAL),
    }
    for (pages, seed) in filled.iter().zip([0xa5, 0x5a]) {
        let mut got = [0u8; LEN];
        pages.as_ref().and_then(|p| p.page(0)).ok_or(EIO)?.read(0, &mut got)?;
        if got != pattern(seed) {
            pr_err!("verbs self-test: an RDMA Read into owned pages brought the wrong bytes\n");
            return Err(EIO);
        }
    }
    Ok(())
}

/// Checks that preparing `what` on `srv` (`prepared`) failed with `EINVAL`
/// and left no R/W operation behind.
fn rw_refused(srv: &Connection<Side>, what: &str, prepared: Result<RwChunk<Inbound>>) -> Result {
    match prepared {
        Err(e) if e == EINVAL && srv.rw_live() == 0 => Ok(()),
        Err(e) => {
            pr_err!("verbs self-test: {} failed with {}, {} left\n", what, e.to_errno(), srv.rw_live());
            Err(EIO)
        }
        Ok(c) => {
            pr_err!("verbs self-test: {} was prepared\n", what);
            let _ = srv.rw_discard(c);
            Err(EIO)
        }
    }
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
    step_ok("resolve route", cli.resolve_route(STEP_MS))
        .inspect_err(|_| pr_err!("verbs self-test: the address resolved to device {}\n", cli.device_name()))?;
    cli_side.wait("resolve route", |s| s.route_resolved)?;
    step_ok("create queue pair", cli.create_qp(config(2)))?;
    step_ok("connect", cli.connect(HELLO, 1))?;
    // The request waits for this thread, which accepts it outside the
    // CM's handler.
    srv_side.wait("connection request", |s| s.requests >= 1)?;
    let srv = step_ok("accept", listener.acceptor().accept())?;
    cli_side.wait("connect", |s| s.established)?;
    srv_side.wait("accept", |s| s.established)?;
    Ok(srv)
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

/// `send_one` (register one region and send, no token in between) is
/// refused before anything is mapped or posted, and gives back only what
/// was the caller's: for a region that is not idle (here registered into
/// the lender's unposted token) with `EINVAL`, nothing pooled; for a
/// lender whose token is out with `EBUSY`, its region pooled. The page
/// keeps no reference of either, and the lender still has its one token.
fn send_one_refused<T: ConnHandler>(cli: &Connection<T>, lender: &Lender, page: &OwnedPage) -> Result {
    let refs = page.ref_count();
    let nothing = |_: &Registered, _: &mut SendWriter<'_, Mapping>| Ok(());
    let mut reg = cli.begin(lender)?;
    // The lender's token is out: refused, the region pooled.
    let busy = match cli.pool_take() {
        Ok(i) => refused(cli, lender, cli.send_one::<Inbound>(lender, i, 1, page_sg(page), nothing), (EBUSY, 1)),
        Err(_) => false,
    };
    // A region registered into that token is not idle: refused, nothing
    // pooled (it stays the token's).
    let held = cli.pool_take().and_then(|i| cli.register_at::<Inbound>(&mut reg, i, 1, page_sg(page)).map(|_| i));
    let taken = match held {
        Ok(i) => {
            let other = Lender::new();
            refused(cli, &other, cli.send_one::<Inbound>(&other, i, 1, page_sg(page), nothing), (EINVAL, 0))
        }
        Err(_) => false,
    };
    let back = matches!(cli.release_unposted(lender, reg), Ok((_, n)) if n == usize::from(taken))
        && lender.released_idle().is_some();
    if !taken || !busy || !back || page.ref_count() != refs {
        pr_err!("verbs self-test: send_one refusals: not idle {}, busy {}, given back {}\n", taken, busy, back);
        return Err(EIO);
    }
    Ok(())
}

/// True if `one`, a `send_one` of `lender`, failed as `want` (the error,
/// regions pooled); one that went out is released.
fn refused<T: ConnHandler>(
    cli: &Connection<T>,
    lender: &Lender,
    one: core::result::Result<(InFlight, Registered), (Error, usize, Option<Registration>)>,
    want: (Error, usize),
) -> bool {
    match one {
        Ok((t, _)) => {
            pr_err!("verbs self-test: send_one went out where it must not\n");
            let _ = cli.release(lender, t, None);
            false
        }
        Err((_, _, Some(reg))) => {
            pr_err!("verbs self-test: a send_one refused before posting left a token\n");
            let _ = cli.release_unposted(lender, reg);
            false
        }
        Err((err, pooled, None)) => (err, pooled) == want,
    }
}
