// SPDX-License-Identifier: GPL-2.0

//! RPC transports (`struct rpc_xprt`) and the operations SUNRPC calls on them.
//!
//! [`new_xprt`] allocates an `rpc_xprt` with SUNRPC's own allocator and
//! attaches a Rust transport object `T: Transport` to it; the operations table
//! is built from the trait. SUNRPC owns the `rpc_xprt`; the transport object
//! lives exactly as long (it is dropped in the `destroy` operation, right
//! before SUNRPC's memory is freed). Callbacks get `&T` and borrowed handles
//! ([`Xprt`], [`Task`], [`Rqst`]) that are only valid for the call.

use core::{
    marker::PhantomData,
    pin::Pin,
    ptr::{self, NonNull},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVVec, KVec},
    error::{Error, Result},
    ffi::{self, c_int, c_ulong, c_ushort, c_void},
    prelude::*,
    str::CStr,
    ThisModule,
};

use super::cell::{CShared, LeaseCell};
use super::net::{Net, SockAddr};
use super::page::PageRef;
use crate::sys;
use kernel::sync::{Arc, ArcBorrow};

/// Where `len` bytes at XDR offset `at` of `buf` start, if they lie within
/// its head. Most copies do (a call's header, a reply's fields before its
/// data, a small message whole): they are made directly, without SUNRPC's
/// walk of the buffer's parts.
fn in_head(buf: &sys::xdr_buf, at: u32, len: usize) -> Option<*mut u8> {
    let end = (at as usize).checked_add(len)?;
    // `wrapping_add` stays inside the head: `at <= end <= iov_len`.
    (end <= buf.head[0].iov_len).then(|| buf.head[0].iov_base.cast::<u8>().wrapping_add(at as usize))
}

/// Copies `data` into `buf` at XDR offset `at`; 0 or a negative errno.
fn write_xdr(buf: &sys::xdr_buf, at: u32, data: &[u8]) -> c_int {
    if data.is_empty() {
        return 0;
    }
    if let Some(dst) = in_head(buf, at, data.len()) {
        // SAFETY: the head is writable for `iov_len` bytes, of which these
        // `data.len()` are a part; `data` is another object.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        return 0;
    }
    // SAFETY: `buf` describes writable buffers; the function bounds the copy
    // by the buffer's parts.
    unsafe { sys::write_bytes_to_xdr_buf(buf, at, data.as_ptr().cast_mut().cast(), data.len() as u32) }
}

/// `struct rpc_xprt` followed by the pointer to its Rust transport object.
#[repr(C)]
struct Shell {
    xprt: sys::rpc_xprt,
    transport: *const c_void,
}

/// A transport SUNRPC created through this module.
///
/// # Invariants
///
/// `raw` is an `rpc_xprt` made by [`new_xprt`] (a `Shell`), live for `'a`.
/// `Xprt<'static>` is handed only to the transport object `new_xprt` makes,
/// which `destroy` drops (after `Transport::shutdown`) before the memory is
/// freed.
#[derive(Clone, Copy)]
pub(crate) struct Xprt<'a> {
    raw: NonNull<sys::rpc_xprt>,
    _life: PhantomData<&'a sys::rpc_xprt>,
}

// SAFETY: SUNRPC transports are used from any context; every method below
// either touches fields SUNRPC documents as the transport's, or calls SUNRPC
// functions that do their own locking.
unsafe impl Send for Xprt<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for Xprt<'_> {}

/// SUNRPC's generic per-transport counters.
pub(crate) struct XprtStat {
    pub(crate) bind_count: u64,
    pub(crate) connect_count: u64,
    /// Jiffies spent connecting.
    pub(crate) connect_time: u64,
    pub(crate) sends: u64,
    pub(crate) recvs: u64,
    pub(crate) bad_xids: u64,
    pub(crate) req_u: u64,
    pub(crate) bklog_u: u64,
}

/// An RPC task, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_task` for `'a` (the callback that received it).
pub(crate) struct Task<'a> {
    raw: NonNull<sys::rpc_task>,
    _life: PhantomData<&'a sys::rpc_task>,
}

/// An RPC request, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_rqst` of a transport of this module for `'a` (the
/// callback that received it), owned by the task acting for it.
pub(crate) struct Rqst<'a> {
    raw: NonNull<sys::rpc_rqst>,
    _life: PhantomData<&'a sys::rpc_rqst>,
}

/// A request found by XID and pinned: SUNRPC will not free or reuse it until
/// it is completed (or failed), which unpins it; dropping it unpins it and
/// leaves it waiting for its reply.
///
/// # Invariants
///
/// `raw` is an `rpc_rqst` found by `xprt_lookup_rqst` and pinned with
/// `xprt_pin_rqst` under the transport's queue lock; while `done` is false
/// it is pinned (so live and not reused), and `done` is set exactly when it
/// is completed or unpinned.
pub(crate) struct PinnedRqst {
    raw: NonNull<sys::rpc_rqst>,
    done: bool,
}

/// Bytes of a request's own call and reply buffer ([`RqstStorage`]). Most
/// calls and replies fit (bulk data travels in the page lists); larger ones
/// get SUNRPC's. A buffer size, not a page.
pub(crate) const SLOT_BUFFER: usize = 4096;

/// An `rpc_rqst` the transport keeps, with a call and reply buffer of its
/// own: lent to SUNRPC from [`RqstStorage::lend`] (or a backlog hand-over)
/// until SUNRPC gives it back in `free_slot` ([`FreedRqst`]).
///
/// # Invariants
///
/// `lent` is away exactly while SUNRPC may use `rqst` (a task holds it, or
/// is being handed it); while `lent` is idle no task refers to `rqst`.
/// `rqst` does not move while lent (the storage is pinned where it lives:
/// every constructor of a value that holds one pins it, see
/// [`PinnedSlice`]).
pub(crate) struct RqstStorage {
    rqst: CShared<sys::rpc_rqst>,
    lent: LeaseCell<()>,
    /// SUNRPC encodes the call into it and decodes the reply from it while
    /// the request is its task's, so only raw pointers to it leave here.
    buffer: KBox<CShared<[u8; SLOT_BUFFER]>>,
}

impl RqstStorage {
    /// A zeroed request (as SUNRPC's own slot allocator hands them out),
    /// not lent.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: `CShared` may hold uninitialised bytes (an `Opaque`).
        let buffer = unsafe { KBox::<CShared<[u8; SLOT_BUFFER]>>::new_uninit(GFP_KERNEL)?.assume_init() };
        Ok(RqstStorage { rqst: CShared::new(Default::default()), lent: LeaseCell::new(()), buffer })
    }

    /// Where the `rpc_rqst` lies inside the storage, to find a storage by
    /// a request's address ([`PinnedSlice::at_addr`]).
    pub(crate) const RQST_OFFSET: usize = core::mem::offset_of!(RqstStorage, rqst);

    /// Lends the request to `task` (which asked for a slot); false if it is
    /// lent already.
    pub(crate) fn lend(&self, task: &Task<'_>) -> bool {
        let Some(l) = self.lent.lease() else { return false };
        l.hand_off();
        let t = task.raw.as_ptr();
        // SAFETY: the task is valid for the callback; the request is not
        // lent (it was idle), so no other task refers to it.
        unsafe {
            (*t).tk_rqstp = self.rqst.get();
            (*t).tk_status = 0;
        }
        true
    }

    /// Lends the request to the first task waiting on `x`'s backlog; false
    /// (and the request stays idle) if none waits or it is lent already.
    pub(crate) fn lend_to_backlog(&self, x: Xprt<'_>) -> bool {
        let Some(l) = self.lent.lease() else { return false };
        // Away before the hand-over: the task may run and free it at once.
        l.hand_off();
        // SAFETY: valid transport; the request was idle, so no task refers
        // to it.
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst.get()) } {
            return true;
        }
        // SAFETY: nobody took the request: it was never lent.
        drop(unsafe { self.lent.take_back() });
        false
    }

    /// `free_slot`: SUNRPC gives `freed` back. It goes straight on to the
    /// first task on the backlog if one waits; otherwise it is zeroed and
    /// idle, and true is returned (the caller keeps it as free). False, and
    /// nothing done, if `freed` is not this storage's request.
    pub(crate) fn take_back(&self, x: Xprt<'_>, freed: FreedRqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst.get(), freed.raw.as_ptr()) {
            return false;
        }
        // SAFETY: valid transport; SUNRPC gave the request back, so handing
        // it to another task is ours to do (it stays lent).
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst.get()) } {
            return false;
        }
        // SAFETY: SUNRPC gave the request back (`free_slot`) and no task
        // took it over: nothing in SUNRPC refers to it any more.
        let Some(l) = (unsafe { self.lent.take_back() }) else { return false };
        // SAFETY: the request is idle: nobody uses it. SUNRPC's own
        // allocator clears a request it takes back, and its users rely on
        // that (the credential pointer, for one, is not set again before it
        // is looked at).
        unsafe { core::ptr::write_bytes(self.rqst.get(), 0, 1) };
        drop(l);
        true
    }

    /// `buf_alloc`: points the call and reply buffers of `rqst` (sized by
    /// SUNRPC in `rq_callsize` and `rq_rcvsize`) into the storage's own
    /// buffer, call first, as SUNRPC lays them out. False if `rqst` is not
    /// this storage's or they do not fit.
    pub(crate) fn provide_buffers(&self, rqst: &Rqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst.get(), rqst.raw.as_ptr()) {
            return false;
        }
        let (call, reply) = (rqst.get().rq_callsize, rqst.get().rq_rcvsize);
        if !matches!(call.checked_add(reply), Some(n) if n <= SLOT_BUFFER) {
            return false;
        }
        let base = self.buffer.get().cast::<u8>();
        let r = rqst.raw.as_ptr();
        // SAFETY: the request is the calling task's, which is asking for
        // its buffers; `call <= SLOT_BUFFER`, so the reply buffer starts
        // inside (or right at the end of) the storage's buffer.
        unsafe {
            (*r).rq_buffer = base.cast();
            (*r).rq_rbuffer = base.add(call).cast();
        }
        true
    }

    /// True if the buffers of `rqst` are this storage's own (nothing to
    /// free).
    pub(crate) fn owns_buffers(&self, rqst: &Rqst<'_>) -> bool {
        rqst.get().rq_buffer == self.buffer.get().cast::<c_void>()
    }

    /// Credits are granted per connection (RFC 8166 section 3.3.3): a
    /// request that held a congestion window slot on the old connection
    /// must claim one again on the new. Call while connecting, when no
    /// request is being sent, before [`Xprt::reset_cwnd`].
    pub(crate) fn forget_cong(&self, x: Xprt<'_>) {
        // SAFETY: valid transport; the request stays allocated; the helper
        // takes transport_lock, under which SUNRPC reads and changes
        // `rq_cong`.
        unsafe { sys::rpcrdma_rs_clear_rq_cong(x.as_ptr(), self.rqst.get()) };
    }
}

/// A request SUNRPC gives back (`free_slot`), for [`RqstStorage::take_back`].
///
/// # Invariants
///
/// `raw` is the request SUNRPC passed to `free_slot`, live for `'a`.
pub(crate) struct FreedRqst<'a> {
    raw: NonNull<sys::rpc_rqst>,
    _life: PhantomData<&'a sys::rpc_rqst>,
}

impl FreedRqst<'_> {
    /// The request's address, to find its storage.
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }
}

/// `n` values initialised in place in one allocation that never moves: each
/// is pinned for the slice's life, and one is found from the address of
/// one of its fields with a range check and a division.
///
/// # Invariants
///
/// `v` is never grown or shrunk after `new`, so its elements never move.
pub(crate) struct PinnedSlice<T> {
    v: KVVec<T>,
}

impl<T> PinnedSlice<T> {
    /// `n` values, the `i`th made by `init(i)`. The allocation may come
    /// from vmalloc: nothing in it may be mapped for DMA.
    pub(crate) fn new<I: PinInit<T>>(n: usize, mut init: impl FnMut(usize) -> Result<I>) -> Result<Self> {
        let mut v = KVVec::<T>::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let init = init(i)?;
            let Some(place) = v.spare_capacity_mut().first_mut() else {
                return Err(ENOMEM);
            };
            // SAFETY: `place` is the uninitialised element `i` of an
            // allocation that never moves: the vector has room for all `n`
            // values and is never grown or shrunk (type invariant), so the
            // value stays where it is initialised, pinned, until the slice
            // is dropped (which drops it in place).
            match unsafe { super::compat::pin_init_at(init, place.as_mut_ptr()) } {
                Ok(()) => {}
                Err(never) => match never {},
            }
            // SAFETY: elements `0..=i` are initialised.
            unsafe { super::compat::kvec_push_initialised(&mut v) };
        }
        Ok(PinnedSlice { v })
    }

    /// The `i`th value.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.v.get(i)
    }

    /// Every value.
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.v.iter()
    }

    /// The value whose field at `offset` (bytes into `T`) lies at `addr`.
    #[inline]
    pub(crate) fn at_addr(&self, addr: usize, offset: usize) -> Option<&T> {
        let size = core::mem::size_of::<T>();
        let at = addr.checked_sub(self.v.as_ptr() as usize)?.checked_sub(offset)?;
        if size == 0 || at % size != 0 {
            return None;
        }
        self.v.get(at / size)
    }
}

/// A backchannel request: SUNRPC's `rpc_rqst`, a page holding a copy of the
/// backward call, and a page the callback service encodes its reply into.
/// Idle in the transport's pool; SUNRPC's (the callback service's) from
/// [`BcRqst::deliver`] until `bc_free_rqst` gives it back
/// ([`FreedBcRqst`]).
///
/// # Invariants
///
/// `bufs` is away exactly while the request is queued to or held by the
/// callback service; the value lives in a `Pin<KBox>` (made only by
/// [`BcRqst::new`]), so `rqst` and the buffers do not move.
pub(crate) struct BcRqst {
    rqst: CShared<sys::rpc_rqst>,
    bufs: LeaseCell<BcBufs>,
}

struct BcBufs {
    call: KVec<u8>,
    reply: KVec<u8>,
}

/// Why a backward call was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BcError {
    /// The request is in use.
    Busy,
    /// No callback service is attached to the transport (yet).
    NoService,
    /// The call does not fit a request's page, or is too short.
    BadSize,
}

impl BcRqst {
    /// A request with page-sized call and reply buffers.
    pub(crate) fn new() -> Result<Pin<KBox<Self>>> {
        let ps = super::PAGE_SIZE as usize;
        let bufs = BcBufs { call: KVec::from_elem(0u8, ps, GFP_KERNEL)?, reply: KVec::from_elem(0u8, ps, GFP_KERNEL)? };
        Ok(KBox::pin(BcRqst { rqst: CShared::new(Default::default()), bufs: LeaseCell::new(bufs) }, GFP_KERNEL)?)
    }

    /// Hands the backward call `msg` (the RPC message from its XID on) to
    /// `x`'s callback service in this request.
    pub(crate) fn deliver(&self, x: Xprt<'_>, msg: &[u8]) -> core::result::Result<(), BcError> {
        let mut b = self.bufs.lease().ok_or(BcError::Busy)?;
        let BcBufs { call, reply } = &mut *b;
        if msg.len() < 8 || msg.len() > call.len() {
            return Err(BcError::BadSize);
        }
        for (d, s) in call.iter_mut().zip(msg) {
            *d = *s;
        }
        let (call, reply, reply_len) = (call.as_mut_ptr(), reply.as_mut_ptr(), reply.len());
        b.hand_off();
        // SAFETY: the request is idle (its buffers were) and handed off with
        // them; they stay put (pinned, never-grown KVecs) until
        // `take_back`. The transport is live.
        let ok = unsafe {
            sys::rpcrdma_rs_bc_prepare(self.rqst.get(), x.as_ptr(), call.cast(), msg.len(), reply.cast(), reply_len);
            sys::rpcrdma_rs_bc_enqueue(self.rqst.get())
        };
        if !ok {
            // SAFETY: not enqueued: nobody got the request.
            drop(unsafe { self.bufs.take_back() });
            return Err(BcError::NoService);
        }
        Ok(())
    }

    /// `bc_free_rqst`: the callback service gives `freed` back. True if it
    /// was this request (idle again).
    pub(crate) fn take_back(&self, freed: &FreedBcRqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst.get(), freed.raw.as_ptr()) {
            return false;
        }
        // SAFETY: SUNRPC gives the request back when the callback service
        // is done with it and its buffers.
        unsafe { self.bufs.take_back() }.is_some()
    }
}

/// A backchannel request the callback service gives back
/// (`bc_free_rqst`), for [`BcRqst::take_back`].
///
/// # Invariants
///
/// `raw` is the request SUNRPC passed to `bc_free_rqst`, live for `'a`.
pub(crate) struct FreedBcRqst<'a> {
    raw: NonNull<sys::rpc_rqst>,
    _life: PhantomData<&'a sys::rpc_rqst>,
}

/// The Rust side of a transport.
pub(crate) trait Transport: Send + Sync + Sized {
    /// The callback service is done with a backchannel request
    /// ([`BcRqst::take_back`]). The transport reference the request held is
    /// dropped after this returns.
    fn bc_free(&self, rqst: FreedBcRqst<'_>);
    /// Most bytes of a backward call or reply (under RCU: must not sleep).
    fn bc_maxpayload(&self, xprt: Xprt<'_>) -> usize;
    /// Backward requests the transport accepts at once.
    fn bc_num_slots(&self) -> u32;
    /// Give `task` a request slot (or queue it on the backlog).
    fn alloc_slot(&self, xprt: Xprt<'_>, task: &Task<'_>);
    /// Take a request slot back ([`RqstStorage::take_back`]).
    fn free_slot(&self, xprt: Xprt<'_>, rqst: FreedRqst<'_>);
    /// The task is done with its buffers; release what the transport holds
    /// for the request (its memory registrations). May sleep.
    fn release_request(&self, xprt: Xprt<'_>, rqst: &Rqst<'_>);
    /// Point the request's call and reply buffers at memory the transport
    /// keeps for it ([`RqstStorage::provide_buffers`]); false if it has none
    /// large enough (SUNRPC's allocator is used instead).
    fn provide_buffers(&self, rqst: &Rqst<'_>) -> bool;
    /// True if the request's buffers are the transport's own.
    fn owns_buffers(&self, rqst: &Rqst<'_>) -> bool;
    /// Start (re)connecting; `task` waits on the pending queue.
    fn connect(this: ArcBorrow<'_, Self>, xprt: Xprt<'_>, task: &Task<'_>);
    /// Close the connection (SUNRPC holds the send lock).
    fn close(&self, xprt: Xprt<'_>);
    /// Send a marshalled request; errors are SUNRPC's (`ENOTCONN`, `EAGAIN`, ...).
    fn send_request(&self, xprt: Xprt<'_>, rqst: &Rqst<'_>) -> Result;
    /// A request timed out.
    fn timer(&self, xprt: Xprt<'_>);
    /// Fault injection: drop the connection.
    fn inject_disconnect(&self, xprt: Xprt<'_>);
    /// Write the `xprt:` line of `/proc/self/mountstats`.
    fn print_stats(&self, xprt: Xprt<'_>, out: &mut StatsWriter<'_>);
    /// Stop everything before the transport is freed (no more callbacks).
    fn shutdown(&self, xprt: Xprt<'_>);
}

/// Output for [`Transport::print_stats`].
///
/// # Invariants
///
/// `seq` is the `seq_file` SUNRPC passed to `print_stats`, live and ours to
/// write for `'a`.
pub(crate) struct StatsWriter<'a> {
    seq: NonNull<sys::seq_file>,
    _life: PhantomData<&'a mut sys::seq_file>,
}

impl StatsWriter<'_> {
    /// Appends a NUL-terminated string.
    pub(crate) fn puts(&mut self, s: &CStr) {
        // SAFETY: `seq` is valid for the duration of the callback.
        unsafe { sys::__seq_puts(self.seq.as_ptr(), super::compat::cstr_ptr(s)) };
    }
}

/// Transport parameters fixed at creation.
pub(crate) struct XprtParams {
    /// Maximum number of requests (slot table size).
    pub(crate) max_slots: u32,
    /// Largest RPC payload.
    pub(crate) max_payload: u32,
    /// `to_initval` and `to_maxval` of the default RPC timeout (jiffies).
    pub(crate) timeout: u64,
    /// Initial and maximum reconnect delay, idle timeout, bind timeout (jiffies).
    pub(crate) reestablish: u64,
    /// Largest reconnect delay (jiffies).
    pub(crate) max_reconnect: u64,
    /// Idle time before autoclose (jiffies).
    pub(crate) idle: u64,
    /// rpcbind timeout (jiffies).
    pub(crate) bind: u64,
    /// The RPC retransmit timeout of the transport's RPCs; a `static`,
    /// since every transport points at it until SUNRPC frees it.
    pub(crate) rpc_timeout: &'static RpcTimeout,
}

/// An RPC timeout table (`struct rpc_timeout`): fixed `to_initval` and
/// `to_maxval`, no increment, retries or backoff.
pub(crate) struct RpcTimeout(sys::rpc_timeout);

// SAFETY: plain integers, never written after construction.
unsafe impl Sync for RpcTimeout {}

impl RpcTimeout {
    /// A timeout of `jiffies`, first and last.
    pub(crate) const fn new(jiffies: u64) -> Self {
        RpcTimeout(sys::rpc_timeout {
            to_initval: jiffies as c_ulong,
            to_maxval: jiffies as c_ulong,
            to_increment: 0,
            to_retries: 0,
            to_exponential: 0,
        })
    }
}

/// A transport [`new_xprt`] allocated and attached its transport to, not yet
/// handed to SUNRPC: only the class's `setup` callback can take it apart.
///
/// # Invariants
///
/// `raw` is an `rpc_xprt` from `xprt_alloc` with a `Shell` holding a live
/// transport, its addresses formatted and a module reference taken; nothing
/// else refers to it yet.
#[must_use = "dropping a new transport leaks it"]
pub(crate) struct NewXprt {
    raw: NonNull<sys::rpc_xprt>,
}

impl NewXprt {
    /// Gives the transport to SUNRPC (the `setup` callback's return value).
    pub(super) fn into_raw(self) -> NonNull<sys::rpc_xprt> {
        self.raw
    }
}

/// Allocates an `rpc_xprt` for `args` and attaches the transport `make`
/// returns. Takes a module reference for the transport's lifetime.
pub(crate) fn new_xprt<T: Transport>(
    args: &super::xprt::CreateArgs<'_>,
    module: &'static ThisModule,
    params: &XprtParams,
    netid: &'static CStr,
    make: impl FnOnce(Xprt<'static>) -> Result<Arc<T>>,
) -> Result<NewXprt> {
    let raw = args.raw();
    if raw.addrlen > core::mem::size_of::<sys::__kernel_sockaddr_storage>() || raw.dstaddr.is_null() {
        return Err(EBADF);
    }
    // SAFETY: the module is live (we are running its code).
    if !unsafe { sys::rpcrdma_rs_try_module_get(module.as_ptr().cast()) } {
        return Err(EIO);
    }
    let put_module = || {
        // SAFETY: balances the `try_module_get` above.
        unsafe { sys::module_put(module.as_ptr().cast()) }
    };
    // SAFETY: `net` comes from SUNRPC's create arguments.
    let xprt = unsafe { sys::xprt_alloc(raw.net, core::mem::size_of::<Shell>(), 0, params.max_slots) };
    let Some(xprt) = NonNull::new(xprt) else {
        put_module();
        return Err(ENOMEM);
    };
    // SAFETY: freshly allocated and zeroed by `xprt_alloc`; nobody else has
    // it yet. `dstaddr` holds `addrlen` bytes (checked to fit `addr`).
    unsafe {
        let x = &mut *xprt.as_ptr();
        x.timeout = &params.rpc_timeout.0;
        x.connect_timeout = params.timeout as c_ulong;
        x.max_reconnect_timeout = params.max_reconnect as c_ulong;
        x.bind_timeout = params.bind as c_ulong;
        x.reestablish_timeout = params.reestablish as c_ulong;
        x.idle_timeout = params.idle as c_ulong;
        x.set_resvport(0);
        x.ops = &OpsTable::<T>::OPS;
        // Side protocols (NLM, rpcbind) look at addr as a TCP address.
        x.prot = sys::IPPROTO_TCP as c_int;
        x.addrlen = raw.addrlen;
        core::ptr::copy_nonoverlapping(raw.dstaddr.cast::<u8>(), (&raw mut x.addr).cast::<u8>(), raw.addrlen);
        x.max_payload = params.max_payload as usize;
    }
    // 'static: the transport object (the only holder of this handle beyond
    // the call) is dropped in `destroy`, before SUNRPC frees the memory.
    let handle: Xprt<'static> = Xprt { raw: xprt, _life: PhantomData };
    if handle.port() != 0 {
        // SAFETY: valid transport.
        unsafe { sys::rpcrdma_rs_xprt_set_bound(xprt.as_ptr()) };
    }
    let fail = |e: Error| {
        handle.free_addresses();
        // SAFETY: allocated above and never handed to SUNRPC.
        unsafe { sys::xprt_free(xprt.as_ptr()) };
        put_module();
        e
    };
    if let Err(e) = handle.format_addresses(netid) {
        return Err(fail(e));
    }
    let transport = match make(handle) {
        Ok(t) => t,
        Err(e) => return Err(fail(e)),
    };
    // SAFETY: `xprt` was allocated with room for a `Shell`. The shell owns
    // one reference of the transport until `destroy`.
    unsafe { (*xprt.as_ptr().cast::<Shell>()).transport = Arc::into_raw(transport).cast() };
    // INVARIANT: allocated, set up and given its transport above.
    Ok(NewXprt { raw: xprt })
}

impl<'a> Xprt<'a> {
    /// `alloc_slot` found no free request: `task` waits on the
    /// transport's backlog (with `EAGAIN`) until one is lent to it.
    pub(crate) fn add_backlog(self, task: &Task<'_>) {
        let t = task.raw.as_ptr();
        // SAFETY: the transport and the task (asking for a slot in this
        // callback) are valid.
        unsafe {
            (*t).tk_status = -(sys::EAGAIN as c_int);
            sys::xprt_add_backlog_noncongested(self.as_ptr(), t);
        }
    }

    /// # Safety
    ///
    /// `raw` must be a transport made by [`new_xprt`] with transport type `T`,
    /// valid for `'a`.
    unsafe fn transport<T: Transport>(raw: *mut sys::rpc_xprt) -> (Xprt<'a>, &'a T) {
        // SAFETY: per the contract, `raw` is a `Shell` whose `transport` is a
        // live `T` (set before SUNRPC could call any operation).
        unsafe {
            let t = &*(*raw.cast::<Shell>()).transport.cast::<T>();
            (Xprt { raw: NonNull::new_unchecked(raw), _life: PhantomData }, t)
        }
    }

    fn get(&self) -> &sys::rpc_xprt {
        // SAFETY: valid for `'a` (type invariant).
        unsafe { self.raw.as_ref() }
    }

    /// The raw pointer, for APIs that identify the transport by address.
    pub(crate) fn as_ptr(&self) -> *mut sys::rpc_xprt {
        self.raw.as_ptr()
    }

    /// The network namespace the transport lives in.
    pub(crate) fn net(&self) -> &'a Net {
        // SAFETY: a transport holds a reference on its namespace from
        // `xprt_alloc` until it is freed, after every user of `'a`.
        unsafe { Net::from_raw(self.get().xprt_net) }
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> &'a SockAddr {
        // SAFETY: `addr` is the transport's `sockaddr_storage`, valid for
        // `'a` (type invariant); SUNRPC changes only its port, with the
        // transport quiescent (`set_port`).
        unsafe { SockAddr::from_raw(&raw const (*self.raw.as_ptr()).addr) }
    }

    /// The peer's address, for C functions.
    fn peer(&self) -> *const sys::sockaddr {
        (&raw const self.get().addr).cast()
    }

    /// The peer's socket address as bytes (family, port, address).
    pub(crate) fn peer_bytes(&self) -> &[u8] {
        let x = self.get();
        let len = x.addrlen.min(core::mem::size_of_val(&x.addr));
        // SAFETY: `addr` is plain data the transport owns for its whole
        // life, at least `len` bytes long.
        unsafe { core::slice::from_raw_parts((&raw const x.addr).cast::<u8>(), len) }
    }

    /// The peer's address as text (`RPC_DISPLAY_ADDR`), copied: writing
    /// the transport's sysfs `dstaddr` replaces the string at any time.
    pub(crate) fn addr_str(&self) -> AddrText {
        let mut t = AddrText { buf: [0; ADDR_TEXT_LEN] };
        // SAFETY: valid transport; the helper writes at most `buf.len()`
        // bytes, NUL included.
        unsafe { sys::rpcrdma_rs_xprt_addr_copy(self.raw.as_ptr(), t.buf.as_mut_ptr().cast(), t.buf.len()) };
        t
    }

    /// The peer's port, host order.
    pub(crate) fn port(&self) -> u16 {
        let sa = self.get();
        // SAFETY: `addr` is a sockaddr_storage; the family says which layout.
        unsafe {
            match u32::from((*self.peer()).sa_family) {
                sys::AF_INET => u16::from_be((*(&raw const sa.addr).cast::<sys::sockaddr_in>()).sin_port),
                sys::AF_INET6 => u16::from_be((*(&raw const sa.addr).cast::<sys::sockaddr_in6>()).sin6_port),
                _ => 0,
            }
        }
    }

    /// Sets the peer's port (after rpcbind) and its display strings.
    fn set_port(&self, port: u16) {
        let x = self.raw.as_ptr();
        // SAFETY: SUNRPC calls set_port with the transport quiescent; the
        // family selects the layout of `addr`.
        unsafe {
            match u32::from((*self.peer()).sa_family) {
                sys::AF_INET => (*(&raw mut (*x).addr).cast::<sys::sockaddr_in>()).sin_port = port.to_be(),
                sys::AF_INET6 => (*(&raw mut (*x).addr).cast::<sys::sockaddr_in6>()).sin6_port = port.to_be(),
                _ => {}
            }
        }
        let mut dec = super::FmtBuf::<8>::new();
        let mut hex = super::FmtBuf::<8>::new();
        use core::fmt::Write;
        let _ = write!(dec, "{}\0", port);
        let _ = write!(hex, "{:4x}\0", port);
        self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_PORT, dec.as_bytes());
        self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_HEX_PORT, hex.as_bytes());
    }

    /// Replaces one display string with a kstrdup'ed copy of `nul_terminated`.
    fn replace_address(&self, which: u32, nul_terminated: &[u8]) -> bool {
        if nul_terminated.last() != Some(&0) {
            return false;
        }
        let x = self.raw.as_ptr();
        // SAFETY: the string is NUL-terminated (checked); the old one was
        // kstrdup'ed by us (or is NULL) and is freed exactly once here.
        unsafe {
            let new = sys::kstrdup(nul_terminated.as_ptr().cast(), kernel::bindings::GFP_KERNEL);
            let Some(slot) = (*x).address_strings.get_mut(which as usize) else {
                sys::kfree(new.cast());
                return false;
            };
            sys::kfree((*slot).cast());
            *slot = new;
            !new.is_null()
        }
    }

    /// Fills the address strings SUNRPC and NFS display (addr=, port,
    /// netid, ...).
    fn format_addresses(&self, netid: &'static CStr) -> Result {
        use core::fmt::Write;
        let mut addr = [0u8; 64];
        // SAFETY: `peer` is a valid socket address; rpc_ntop writes at most
        // `len` bytes and NUL-terminates.
        let n = unsafe { sys::rpc_ntop(self.peer(), addr.as_mut_ptr().cast(), addr.len()) };
        if n == 0 || n >= addr.len() {
            return Err(EINVAL);
        }
        let mut ok = self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_ADDR, &addr[..=n]);
        let mut hex = super::FmtBuf::<40>::new();
        // SAFETY: family selects the layout.
        unsafe {
            let sa = self.peer();
            match u32::from((*sa).sa_family) {
                sys::AF_INET => {
                    let a = u32::from_be((*sa.cast::<sys::sockaddr_in>()).sin_addr.s_addr);
                    let _ = write!(hex, "{:08x}\0", a);
                }
                sys::AF_INET6 => {
                    for b in (*sa.cast::<sys::sockaddr_in6>()).sin6_addr.in6_u.u6_addr8 {
                        let _ = write!(hex, "{:02x}", b);
                    }
                    let _ = hex.write_str("\0");
                }
                _ => return Err(super::errno::EAFNOSUPPORT()),
            }
        }
        ok &= self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_HEX_ADDR, hex.as_bytes());
        // PROTO and NETID point at static strings, like the in-tree client's.
        let x = self.raw.as_ptr();
        // SAFETY: the slots exist (RPC_DISPLAY_MAX entries); static strings
        // are never freed (see `free_addresses`).
        unsafe {
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_PROTO as usize] =
                super::compat::cstr_ptr(kernel::c_str!("rdma"));
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_NETID as usize] =
                super::compat::cstr_ptr(netid);
        }
        self.set_port(self.port());
        if ok { Ok(()) } else { Err(ENOMEM) }
    }

    /// Frees the kstrdup'ed display strings.
    fn free_addresses(&self) {
        let x = self.raw.as_ptr();
        for (i, slot) in (0..).zip(
            // SAFETY: the transport is being torn down; nobody reads these now.
            unsafe { (*x).address_strings.iter_mut() },
        ) {
            if i == sys::rpc_display_format_t_RPC_DISPLAY_PROTO || i == sys::rpc_display_format_t_RPC_DISPLAY_NETID {
                continue;
            }
            // SAFETY: every other string was kstrdup'ed by us or is NULL.
            unsafe { sys::kfree((*slot).cast()) };
            *slot = core::ptr::null_mut();
        }
    }

    /// Takes the connect lock for `task`; false if a connect is under way.
    pub(crate) fn lock_connect(&self, task: &Task<'_>) -> bool {
        // SAFETY: valid transport and task; the cookie is an identity SUNRPC
        // only compares (see `connect_lock_cookie`).
        unsafe { sys::xprt_lock_connect(self.raw.as_ptr(), task.as_ptr(), self.connect_lock_cookie()) }
    }

    /// What holds the connect lock between [`Xprt::lock_connect`] and
    /// [`Xprt::connect_finished`]: SUNRPC stores it in place of the task
    /// and only compares it. The transport's own address: unique to it, and
    /// the same on both sides of the connect.
    fn connect_lock_cookie(&self) -> *mut c_void {
        self.raw.as_ptr().cast()
    }

    /// Asks to be woken (via [`Xprt::write_space`]) when Send buffers free up.
    pub(crate) fn wait_for_buffer_space(&self) {
        // SAFETY: valid transport.
        unsafe { sys::xprt_wait_for_buffer_space(self.raw.as_ptr()) }
    }

    /// Marks the transport connected.
    pub(crate) fn set_connected(&self) {
        // SAFETY: valid transport.
        unsafe { sys::rpcrdma_rs_xprt_set_connected(self.raw.as_ptr()) }
    }

    /// True if the transport is connected.
    pub(crate) fn connected(&self) -> bool {
        // SAFETY: valid transport.
        unsafe { sys::rpcrdma_rs_xprt_connected(self.raw.as_ptr()) != 0 }
    }

    /// How many tasks wait for a reply (read without the queue's lock: a
    /// hint, good for deciding whether replies are overdue).
    pub(crate) fn replies_awaited(&self) -> u32 {
        // SAFETY: valid transport; the helper only reads a counter.
        unsafe { sys::rpcrdma_rs_xprt_pending_len(self.raw.as_ptr()) }
    }

    /// Ends a connect attempt: clears CONNECTING, releases the connect lock
    /// taken by [`Transport::connect`] and wakes waiting tasks with `status`.
    pub(crate) fn connect_finished(&self, status: Result) {
        let status = match status {
            Ok(()) => -(sys::EAGAIN as c_int),
            Err(e) => e.to_errno(),
        };
        // SAFETY: valid transport; the cookie is the one the lock was taken
        // with.
        unsafe {
            sys::rpcrdma_rs_xprt_clear_connecting(self.raw.as_ptr());
            sys::xprt_unlock_connect(self.raw.as_ptr(), self.connect_lock_cookie());
            sys::xprt_wake_pending_tasks(self.raw.as_ptr(), status);
        }
    }

    /// Records a successful connection in the transport's statistics.
    pub(crate) fn count_connect(&self) {
        // SAFETY: these counters belong to the transport; the connect lock
        // serialises writers.
        unsafe {
            let x = &mut *self.raw.as_ptr();
            x.connect_cookie = x.connect_cookie.wrapping_add(1);
            x.stat.connect_count = x.stat.connect_count.wrapping_add(1);
            let now = core::ptr::read_volatile(&raw const sys::jiffies);
            x.stat.connect_time = x.stat.connect_time.wrapping_add(now.wrapping_sub(x.stat.connect_start));
        }
    }

    /// Reports the connection lost and wakes tasks to retransmit.
    pub(crate) fn disconnect_done(&self) {
        // SAFETY: valid transport; called with the send lock held (close).
        unsafe {
            let x = &mut *self.raw.as_ptr();
            x.reestablish_timeout = 0;
            x.connect_cookie = x.connect_cookie.wrapping_add(1);
            sys::xprt_disconnect_done(self.raw.as_ptr());
        }
    }

    /// Asks SUNRPC to close the transport from process context.
    pub(crate) fn force_disconnect(&self) {
        // SAFETY: valid transport; callable from any context.
        unsafe { sys::xprt_force_disconnect(self.raw.as_ptr()) }
    }

    /// Sets the congestion window (`cwnd`, in SUNRPC's units).
    pub(crate) fn set_cwnd(&self, cwnd: u64) {
        // SAFETY: valid transport; the helper takes transport_lock.
        unsafe { sys::rpcrdma_rs_set_cwnd(self.raw.as_ptr(), cwnd as c_ulong) }
    }

    /// Starts a connection's congestion accounting afresh: a window of
    /// `cwnd` (SUNRPC's units) with nothing counted in it. Clear every
    /// request's own mark first ([`SlotTable::forget_cong`]).
    pub(crate) fn reset_cwnd(&self, cwnd: u64) {
        // SAFETY: valid transport; the helper takes transport_lock.
        unsafe { sys::rpcrdma_rs_reset_cong(self.raw.as_ptr(), cwnd as c_ulong) }
    }

    /// Wakes tasks waiting for Send buffers.
    pub(crate) fn write_space(&self) {
        // SAFETY: valid transport.
        unsafe { sys::xprt_write_space(self.raw.as_ptr()) };
    }

    /// The delay before the next reconnect attempt (jiffies), and backs off.
    pub(crate) fn reconnect_delay(&self, initial: u64) -> u64 {
        // SAFETY: valid transport; SUNRPC holds the connect lock for us.
        unsafe {
            let d = sys::xprt_reconnect_delay(self.raw.as_ptr());
            sys::xprt_reconnect_backoff(self.raw.as_ptr(), initial as c_ulong);
            d as u64
        }
    }

    /// Data arrived: the next reconnect need not wait.
    pub(crate) fn clear_reestablish_timeout(&self) {
        // SAFETY: a plain field the transport owns; a racing write is benign
        // (the in-tree transport does the same).
        unsafe { (*self.raw.as_ptr()).reestablish_timeout = 0 };
    }

    /// Finds the request with `xid` (network order) and pins it.
    pub(crate) fn lookup(&self, xid_be: u32) -> Option<PinnedRqst> {
        // SAFETY: valid transport; the helper takes queue_lock.
        let raw = unsafe { sys::rpcrdma_rs_lookup_and_pin_rqst(self.raw.as_ptr(), xid_be) };
        NonNull::new(raw).map(|raw| PinnedRqst { raw, done: false })
    }

    /// SUNRPC's counters for the transport (for mountstats).
    pub(crate) fn stat(&self) -> XprtStat {
        let s = &self.get().stat;
        XprtStat {
            bind_count: s.bind_count as u64,
            connect_count: s.connect_count as u64,
            connect_time: s.connect_time as u64,
            sends: s.sends as u64,
            recvs: s.recvs as u64,
            bad_xids: s.bad_xids as u64,
            req_u: s.req_u,
            bklog_u: s.bklog_u,
        }
    }

    /// Whether SUNRPC wants the transport connected at all (`connect_cookie`).
    pub(crate) fn connect_cookie(&self) -> u32 {
        self.get().connect_cookie
    }

    /// When the transport was last used (jiffies).
    pub(crate) fn last_used(&self) -> u64 {
        self.get().last_used as u64
    }
}

impl Task<'_> {
    /// The raw pointer, used as the connect lock's owner cookie.
    pub(crate) fn as_ptr(&self) -> *mut sys::rpc_task {
        self.raw.as_ptr()
    }
}

impl Rqst<'_> {
    /// The request's address, to find the transport's state for it.
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    fn get(&self) -> &sys::rpc_rqst {
        // SAFETY: valid for the callback (type invariant).
        unsafe { self.raw.as_ref() }
    }

    /// The XID as it goes on the wire (network byte order value).
    pub(crate) fn xid_be(&self) -> u32 {
        self.get().rq_xid
    }

    /// Length of the marshalled call.
    pub(crate) fn send_len(&self) -> usize {
        self.get().rq_snd_buf.len as usize
    }

    /// Claims a congestion window slot; false if the window is full.
    pub(crate) fn get_cong(&self, xprt: Xprt<'_>) -> bool {
        // SAFETY: valid transport and request.
        unsafe { sys::xprt_request_get_cong(xprt.as_ptr(), self.raw.as_ptr()) }
    }

    /// True if this request was already sent on the current connection.
    pub(crate) fn sent_on_this_connection(&self, xprt: Xprt<'_>) -> bool {
        self.get().rq_connect_cookie == xprt.connect_cookie()
    }

    /// True if a reply is expected (false for e.g. a GSS destroy context).
    pub(crate) fn reply_expected(&self) -> bool {
        // SAFETY: the request's task is valid while it sends.
        unsafe { sys::rpcrdma_rs_rpc_reply_expected(self.get().rq_task) != 0 }
    }

    /// Records the time of transmission, from which SUNRPC's per-operation
    /// statistics (mountstats RTT and queue time) are measured.
    pub(crate) fn stamp_xmit(&self) {
        // SAFETY: the field belongs to the sending task, which is us.
        unsafe { sys::rpcrdma_rs_stamp_xmit(self.raw.as_ptr()) }
    }

    /// Accounts a transmission.
    pub(crate) fn sent(&self, bytes: usize) {
        // SAFETY: these fields belong to the sending task, which is us.
        unsafe {
            let r = &mut *self.raw.as_ptr();
            r.rq_xmit_bytes_sent = r.rq_xmit_bytes_sent.wrapping_add(bytes);
        }
    }
}

/// Which of a request's two buffers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// The call (`rq_snd_buf`).
    Call,
    /// The reply (`rq_rcv_buf`).
    Reply,
}

/// `XDRBUF_SPARSE_PAGES` (a macro bindgen does not see; helpers.c checks
/// the value at build time).
const XDRBUF_SPARSE_PAGES: u32 = 0x04;

/// One of a request's buffers (`struct xdr_buf`: a head, a page list and a
/// tail), borrowed for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct XdrBuf<'a> {
    raw: &'a sys::xdr_buf,
}

impl<'a> XdrBuf<'a> {
    /// Where the head starts in its first page, and its length.
    #[inline]
    pub(crate) fn head(&self) -> (u32, u32) {
        Self::kvec_extent(&self.raw.head[0])
    }

    /// Where the tail starts in its first page, and its length.
    #[inline]
    pub(crate) fn tail(&self) -> (u32, u32) {
        Self::kvec_extent(&self.raw.tail[0])
    }

    /// Where `iov` starts in its first page, and its length.
    #[inline]
    fn kvec_extent(iov: &sys::kvec) -> (u32, u32) {
        (((iov.iov_base as usize) % super::PAGE_SIZE as usize) as u32, iov.iov_len as u32)
    }

    /// Where the page list's data starts in its first page, and its length.
    #[inline]
    pub(crate) fn pages(&self) -> (u32, u32) {
        (self.raw.page_base, self.raw.page_len)
    }

    /// Bytes of data (a call), room (a reply), and the `XDRBUF_*` flags.
    #[inline]
    pub(crate) fn lengths_and_flags(&self) -> (u32, u32, u32) {
        (self.raw.len, self.raw.buflen, self.raw.flags)
    }

    /// Page `i` of the page list, which holds `page_base + page_len` bytes;
    /// `None` past its end.
    #[inline]
    pub(crate) fn page(&self, i: u32) -> Option<PageRef<'a>> {
        let b = self.raw;
        if i >= b.page_base.checked_add(b.page_len)?.div_ceil(super::PAGE_SIZE) {
            return None;
        }
        // SAFETY: the page list has an entry for every page its
        // `page_base + page_len` bytes touch, and `i` is one of them; the
        // pages stay while the request's buffer is borrowed.
        unsafe { PageRef::new(*b.pages.add(i as usize)) }
    }

    /// Page `i` of the head (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn head_page(&self, i: u32) -> Option<PageRef<'a>> {
        Self::kvec_page(&self.raw.head[0], i)
    }

    /// Page `i` of the tail (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn tail_page(&self, i: u32) -> Option<PageRef<'a>> {
        Self::kvec_page(&self.raw.tail[0], i)
    }

    fn kvec_page(iov: &'a sys::kvec, i: u32) -> Option<PageRef<'a>> {
        let ps = super::PAGE_SIZE as usize;
        let start = iov.iov_base as usize;
        if iov.iov_base.is_null() || i as usize >= (start % ps).checked_add(iov.iov_len)?.div_ceil(ps) {
            return None;
        }
        let addr = (start & !(ps - 1)).wrapping_add(i as usize * ps);
        // SAFETY: a head or tail is linearly mapped memory (kmalloc or the
        // page allocator), and `addr` is in one of the pages its bytes
        // touch; they stay while the request's buffer is borrowed.
        unsafe { PageRef::new(sys::rpcrdma_rs_virt_to_page(addr as *const c_void)) }
    }
}

impl Rqst<'_> {
    /// Fills in the missing pages of a reply buffer whose page array is
    /// sparse (`XDRBUF_SPARSE_PAGES`, NFSv3 GETACL): the transport is to
    /// allocate them, the upper layer frees them. Nothing for other
    /// requests.
    #[inline]
    pub(crate) fn fill_sparse_pages(&self) -> Result {
        // Looked at here, so that the usual request costs no call.
        if self.get().rq_rcv_buf.flags & XDRBUF_SPARSE_PAGES == 0 {
            return Ok(());
        }
        // SAFETY: the request is the sending task's (type invariant), and so
        // is its reply buffer, whose page array has an entry for every page
        // of its page list.
        kernel::error::to_result(unsafe { sys::rpcrdma_rs_alloc_sparse_pages(&raw mut (*self.raw.as_ptr()).rq_rcv_buf) })
    }

    /// The call (`rq_snd_buf`) or reply (`rq_rcv_buf`) buffer.
    #[inline]
    pub(crate) fn buf(&self, which: Which) -> XdrBuf<'_> {
        let r = self.get();
        XdrBuf { raw: if which == Which::Call { &r.rq_snd_buf } else { &r.rq_rcv_buf } }
    }

    /// Copies `out.len()` bytes of the call starting at `offset`.
    pub(crate) fn copy_call_at(&self, offset: u32, out: &mut [u8]) -> Result {
        let len = u32::try_from(out.len()).map_err(|_| EINVAL)?;
        if len == 0 {
            return Ok(());
        }
        let b = &self.get().rq_snd_buf;
        if let Some(src) = in_head(b, offset, out.len()) {
            // SAFETY: the head holds `iov_len` readable bytes, of which
            // these `out.len()` are a part; `out` is another object.
            unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        // SAFETY: `rq_snd_buf` is stable while the task sends; `out` is
        // writable for `len` bytes; the function checks the range.
        let rc = unsafe { sys::read_bytes_from_xdr_buf(b, offset, out.as_mut_ptr().cast(), len) };
        if rc != 0 { Err(Error::from_errno(rc)) } else { Ok(()) }
    }

    /// True for a backward reply (the callback service answering the server).
    pub(crate) fn is_backchannel(&self) -> bool {
        // SAFETY: valid request.
        unsafe { sys::rpcrdma_rs_rqst_is_backchannel(self.raw.as_ptr()) }
    }

    /// False for security flavours that must see every byte (krb5i/krb5p):
    /// no direct data placement for them.
    pub(crate) fn ddp_allowed(&self) -> bool {
        // SAFETY: a request being sent has its credential.
        unsafe { sys::rpcrdma_rs_ddp_allowed(self.raw.as_ptr()) }
    }
}

impl PinnedRqst {
    /// The request's address, to find the transport's state for it.
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// The reply buffer (`rq_rcv_buf`).
    pub(crate) fn reply_buf(&self) -> XdrBuf<'_> {
        // SAFETY: pinned (type invariant), so the request and its buffers
        // stay; only the reply path, which holds `self`, changes them.
        XdrBuf { raw: unsafe { &(*self.raw.as_ptr()).rq_rcv_buf } }
    }

    /// The buffer the reply is received into (`rq_private_buf`).
    pub(crate) fn receive_buf(&self) -> XdrBuf<'_> {
        // SAFETY: as for `reply_buf`.
        XdrBuf { raw: unsafe { &(*self.raw.as_ptr()).rq_private_buf } }
    }

    /// Shortens the head of the receive buffer to `len` bytes (nothing if
    /// it is not longer), so that what follows the head (the page list)
    /// comes right after the reply's first `len` bytes.
    pub(crate) fn trim_head(&mut self, len: u32) {
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion (type invariant).
        unsafe {
            let r = &mut *self.raw.as_ptr();
            let Some(delta) = r.rq_private_buf.head[0].iov_len.checked_sub(len as usize) else { return };
            r.rq_private_buf.head[0].iov_len = len as usize;
            r.rq_private_buf.buflen = r.rq_private_buf.buflen.saturating_sub(delta as u32);
            r.rq_rcv_buf.head[0].iov_len = len as usize;
            r.rq_rcv_buf.buflen = r.rq_rcv_buf.buflen.saturating_sub(delta as u32);
        }
    }

    /// Copies `data` into the receive buffer at `offset` (laid out as
    /// head, page list, tail); fails if it does not fit.
    pub(crate) fn write_at(&mut self, offset: u32, data: &[u8]) -> Result {
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion; `write_xdr` bounds the copy by the buffer.
        let rc = unsafe { write_xdr(&(*self.raw.as_ptr()).rq_private_buf, offset, data) };
        if rc != 0 { Err(Error::from_errno(rc)) } else { Ok(()) }
    }

    /// Completes the request with a reply of `len` bytes the caller placed
    /// in the receive buffer (copied with [`PinnedRqst::write_at`] or written
    /// there by the server); never more than the buffer holds.
    pub(crate) fn complete_placed(mut self, len: u32) {
        // SAFETY: pinned.
        let buflen = unsafe { (*self.raw.as_ptr()).rq_private_buf.buflen };
        self.finish(len.min(buflen).min(c_int::MAX as u32) as c_int);
    }

    /// Completes a reply the server wrote whole into the Reply chunk
    /// (`written` bytes, already in the request's buffers).
    pub(crate) fn complete_reply_chunk(mut self, written: u32) {
        // SAFETY: pinned.
        let buflen = unsafe { (*self.raw.as_ptr()).rq_private_buf.buflen };
        self.finish(if written > buflen { -(sys::EIO as c_int) } else { written as c_int });
    }
    /// Copies `reply` into the request's receive buffer and completes it.
    pub(crate) fn complete_with(mut self, reply: &[u8]) {
        let len = u32::try_from(reply.len()).unwrap_or(u32::MAX);
        // SAFETY: the request is pinned, so its buffers stay; `rq_private_buf`
        // describes where SUNRPC wants reply bytes, and the copy is bounded by
        // it (an oversize reply fails with an error instead).
        let copied = unsafe {
            let r = &*self.raw.as_ptr();
            if len > r.rq_private_buf.buflen || write_xdr(&r.rq_private_buf, 0, reply) != 0 {
                -(sys::EIO as c_int)
            } else {
                len as c_int
            }
        };
        self.finish(copied);
    }

    /// Fails the request with `err`.
    pub(crate) fn fail(mut self, err: Error) {
        self.finish(err.to_errno());
    }

    fn finish(&mut self, copied: c_int) {
        if self.done {
            return;
        }
        self.done = true;
        // SAFETY: pinned in `lookup`; completes and unpins under queue_lock.
        unsafe {
            if copied < 0 {
                (*(*self.raw.as_ptr()).rq_task).tk_status = copied;
                sys::rpcrdma_rs_complete_and_unpin_rqst(self.raw.as_ptr(), 0);
            } else {
                sys::rpcrdma_rs_complete_and_unpin_rqst(self.raw.as_ptr(), copied);
            }
        }
    }
}

impl Drop for PinnedRqst {
    fn drop(&mut self) {
        // A lookup that completes nothing (a late reply of an old
        // connection, for a call sent again on the new one) only unpins:
        // the request goes on waiting for the reply that counts.
        if !self.done {
            self.done = true;
            // SAFETY: pinned in `lookup` and not completed; unpins under
            // queue_lock.
            unsafe { sys::rpcrdma_rs_unpin_rqst(self.raw.as_ptr()) };
        }
    }
}

struct OpsTable<T>(PhantomData<T>);

impl<T: Transport> OpsTable<T> {
    const OPS: sys::rpc_xprt_ops = sys::rpc_xprt_ops {
        set_buffer_size: None,
        reserve_xprt: Some(sys::xprt_reserve_xprt_cong),
        release_xprt: Some(sys::xprt_release_xprt_cong),
        alloc_slot: Some(alloc_slot::<T>),
        free_slot: Some(free_slot::<T>),
        rpcbind: Some(sys::rpcb_getport_async),
        set_port: Some(set_port::<T>),
        connect: Some(connect::<T>),
        get_srcaddr: None,
        get_srcport: None,
        buf_alloc: Some(buf_alloc::<T>),
        buf_free: Some(buf_free::<T>),
        prepare_request: None,
        send_request: Some(send_request::<T>),
        abort_send_request: None,
        wait_for_reply_request: Some(sys::xprt_wait_for_reply_request_def),
        timer: Some(timer::<T>),
        release_request: Some(sys::xprt_release_rqst_cong),
        close: Some(close::<T>),
        destroy: Some(destroy::<T>),
        set_connect_timeout: Some(set_connect_timeout::<T>),
        print_stats: Some(print_stats::<T>),
        enable_swap: Some(enable_swap),
        disable_swap: Some(disable_swap),
        inject_disconnect: Some(inject_disconnect::<T>),
        bc_setup: Some(bc_setup),
        bc_maxpayload: Some(bc_maxpayload::<T>),
        bc_num_slots: Some(bc_num_slots::<T>),
        bc_free_rqst: Some(bc_free_rqst::<T>),
        bc_destroy: Some(bc_destroy),
    };
}

/// # Safety
///
/// SUNRPC calls every operation below with a transport made by [`new_xprt`]
/// for `T`, valid for the call; task and request pointers are valid too.
unsafe extern "C" fn connect<T: Transport>(xprt: *mut sys::rpc_xprt, task: *mut sys::rpc_task) {
    // SAFETY: see the contract above.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(task) else { return };
    // SAFETY: `t` is the transport the shell holds a reference of (from
    // `Arc::into_raw`), which it keeps until `destroy`, after every
    // operation.
    let this = unsafe { ArcBorrow::from_raw(core::ptr::from_ref(t)) };
    T::connect(this, x, &Task { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn alloc_slot<T: Transport>(xprt: *mut sys::rpc_xprt, task: *mut sys::rpc_task) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(task) else { return };
    t.alloc_slot(x, &Task { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn free_slot<T: Transport>(xprt: *mut sys::rpc_xprt, rqst: *mut sys::rpc_rqst) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(raw) = NonNull::new(rqst) else { return };
    // INVARIANT: SUNRPC passes the request it gives back.
    t.free_slot(x, FreedRqst { raw, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`]; `task` has a request on this transport.
unsafe extern "C" fn buf_alloc<T: Transport>(task: *mut sys::rpc_task) -> c_int {
    // SAFETY: see `connect`; the task's request belongs to its transport.
    unsafe {
        let rqst = (*task).tk_rqstp;
        if let Some(raw) = NonNull::new(rqst) {
            let (_, t) = Xprt::transport::<T>((*rqst).rq_xprt);
            if t.provide_buffers(&Rqst { raw, _life: PhantomData }) {
                return 0;
            }
        }
        sys::rpcrdma_rs_buf_alloc(task)
    }
}

/// # Safety
///
/// See [`connect`]; `task` has a request on this transport.
unsafe extern "C" fn buf_free<T: Transport>(task: *mut sys::rpc_task) {
    // SAFETY: see `connect`; the task's request belongs to its transport.
    unsafe {
        let rqst = (*task).tk_rqstp;
        let Some(raw) = NonNull::new(rqst) else { return };
        let (x, t) = Xprt::transport::<T>((*rqst).rq_xprt);
        let r = Rqst { raw, _life: PhantomData };
        t.release_request(x, &r);
        // Only what `rpcrdma_rs_buf_alloc` allocated goes back to it.
        if !t.owns_buffers(&r) {
            sys::rpcrdma_rs_buf_free(task);
        }
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn close<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.close(x);
}

/// # Safety
///
/// See [`connect`]. After this returns, SUNRPC never uses `xprt` again.
unsafe extern "C" fn destroy<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.shutdown(x);
    // SAFETY: `transport` came from `Arc::into_raw` in `new_xprt`: the
    // shell's reference, given up here.
    let t = unsafe { Arc::from_raw((*xprt.cast::<Shell>()).transport.cast::<T>()) };
    // After `shutdown` nothing else may hold the transport (its queued work
    // was cancelled): it goes now, before the memory it points into.
    if Arc::into_unique_or_drop(t).is_none() {
        // Someone still holds it and will drop it later: keep the rpc_xprt
        // (and the module) rather than free memory it may still read.
        pr_err!("transport still referenced after shutdown: leaking it\n");
        return;
    }
    x.free_addresses();
    // SAFETY: SUNRPC hands the transport over for freeing; the module
    // reference taken in `new_xprt` is dropped last.
    unsafe {
        sys::xprt_free(xprt);
        sys::module_put(super::compat::this_module().as_ptr().cast());
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn send_request<T: Transport>(rqst: *mut sys::rpc_rqst) -> c_int {
    // SAFETY: see `connect`; a request being sent has its transport set.
    let (x, t) = unsafe { Xprt::transport::<T>((*rqst).rq_xprt) };
    let Some(raw) = NonNull::new(rqst) else { return -(sys::EINVAL as c_int) };
    match t.send_request(x, &Rqst { raw, _life: PhantomData }) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn timer<T: Transport>(xprt: *mut sys::rpc_xprt, _task: *mut sys::rpc_task) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.timer(x);
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn set_port<T: Transport>(xprt: *mut sys::rpc_xprt, port: c_ushort) {
    // SAFETY: see `connect`.
    let (x, _) = unsafe { Xprt::transport::<T>(xprt) };
    x.set_port(port);
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn set_connect_timeout<T: Transport>(xprt: *mut sys::rpc_xprt, connect: c_ulong, reconnect: c_ulong) {
    // SAFETY: see `connect`; SUNRPC serialises this with connects.
    unsafe {
        let x = &mut *xprt;
        x.connect_timeout = connect;
        if reconnect < x.max_reconnect_timeout {
            x.max_reconnect_timeout = reconnect;
        }
    }
}

/// # Safety
///
/// See [`connect`]; `seq` is valid for the call.
unsafe extern "C" fn print_stats<T: Transport>(xprt: *mut sys::rpc_xprt, seq: *mut sys::seq_file) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    let Some(seq) = NonNull::new(seq) else { return };
    t.print_stats(x, &mut StatsWriter { seq, _life: PhantomData });
}

/// # Safety
///
/// See [`connect`].
unsafe extern "C" fn inject_disconnect<T: Transport>(xprt: *mut sys::rpc_xprt) {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.inject_disconnect(x);
}

/// The backchannel requests exist from transport creation on; nothing to set
/// up.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn bc_setup(_xprt: *mut sys::rpc_xprt, _min_reqs: ffi::c_uint) -> c_int {
    0
}

/// # Safety
///
/// See [`connect`]. Runs under RCU.
unsafe extern "C" fn bc_maxpayload<T: Transport>(xprt: *mut sys::rpc_xprt) -> usize {
    // SAFETY: see `connect`.
    let (x, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.bc_maxpayload(x)
}

/// # Safety
///
/// See [`connect`]. Runs under RCU.
unsafe extern "C" fn bc_num_slots<T: Transport>(xprt: *mut sys::rpc_xprt) -> ffi::c_uint {
    // SAFETY: see `connect`.
    let (_, t) = unsafe { Xprt::transport::<T>(xprt) };
    t.bc_num_slots()
}

/// # Safety
///
/// Called by SUNRPC with a backchannel request this transport delivered.
unsafe extern "C" fn bc_free_rqst<T: Transport>(rqst: *mut sys::rpc_rqst) {
    let Some(raw) = NonNull::new(rqst) else { return };
    // SAFETY: the request's transport is one of ours: `deliver` took a
    // reference on it, held until the end of this function.
    let (xprt, t) = unsafe {
        let xprt = (*rqst).rq_xprt;
        (xprt, Xprt::transport::<T>(xprt).1)
    };
    // INVARIANT: SUNRPC passes the request it gives back.
    t.bc_free(FreedBcRqst { raw, _life: PhantomData });
    // SAFETY: drops the reference `deliver` took, once. Nothing of the
    // transport is touched afterwards: this may free it.
    unsafe { sys::xprt_put(xprt) };
}

/// Backchannel requests live as long as the transport; nothing to free here.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn bc_destroy(_xprt: *mut sys::rpc_xprt, _max_reqs: ffi::c_uint) {}

/// Swap over NFS/RDMA needs nothing special from the transport.
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn enable_swap(_xprt: *mut sys::rpc_xprt) -> c_int {
    0
}

/// See [`enable_swap`].
///
/// # Safety
///
/// Called by SUNRPC; touches nothing.
unsafe extern "C" fn disable_swap(_xprt: *mut sys::rpc_xprt) {}

/// Room for an IPv6 address with a scope and the NUL.
const ADDR_TEXT_LEN: usize = 64;

/// A transport's peer address as text, copied out of the transport (see
/// [`Xprt::addr_str`]); prints as the address.
pub(crate) struct AddrText {
    buf: [u8; ADDR_TEXT_LEN],
}

super::compat::printable!(AddrText);

impl core::fmt::Display for AddrText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = self.buf.iter().position(|&b| b == 0).unwrap_or(self.buf.len());
        f.write_str(core::str::from_utf8(&self.buf[..len]).unwrap_or("?"))
    }
}
