// SPDX-License-Identifier: GPL-2.0

//! A transport SUNRPC created through this module (`struct rpc_xprt`):
//! [`new_xprt`], the [`Xprt`] handle the callbacks get, and the SUNRPC calls
//! a transport makes on itself (state, congestion window, addresses).

use core::{
    marker::PhantomData,
    ptr::{self, NonNull},
    sync::atomic::{AtomicUsize, Ordering},
};

use kernel::{
    error::{Error, Result},
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
    ThisModule,
};

use super::{connect_cookie, xdr::read_once, ConnectLock, CreateArgs, OpsTable, PinnedRqst, SendLocked, Task, Transport};
use crate::kapi::{net::Net, svc::SvcTransport};
use crate::sys;

/// `struct rpc_xprt` followed by the pointer to its Rust transport object
/// and the count of [`XprtRef`]s.
#[repr(C)]
pub(super) struct Shell {
    pub(super) xprt: sys::rpc_xprt,
    pub(super) transport: *const c_void,
    pub(super) refs: AtomicUsize,
}

/// A transport SUNRPC created through this module.
///
/// # Invariants
///
/// `raw` is an `rpc_xprt` made by [`new_xprt`] (a `Shell`), live for `'a`.
/// Only kapi makes one, for a call SUNRPC makes or borrowed from an
/// [`XprtRef`].
#[derive(Clone, Copy)]
pub(crate) struct Xprt<'a> {
    pub(super) raw: NonNull<sys::rpc_xprt>,
    pub(super) _life: PhantomData<&'a sys::rpc_xprt>,
}

// SAFETY: SUNRPC transports are used from any context; every method below
// either touches fields SUNRPC documents as the transport's, or calls SUNRPC
// functions that do their own locking.
unsafe impl Send for Xprt<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for Xprt<'_> {}

/// A transport kept beyond a call: what the transport object (and what it
/// shares with its connections) holds. Counted: the transport's memory is
/// freed only if none is left when SUNRPC destroys it (`destroy` leaks it
/// otherwise, with a message), so that no safe code can keep one past the
/// free.
///
/// # Invariants
///
/// `raw` is a `Shell` made by [`new_xprt`] whose `refs` counts this value.
pub(crate) struct XprtRef {
    raw: NonNull<sys::rpc_xprt>,
}

// SAFETY: as `Xprt`; the count is atomic.
unsafe impl Send for XprtRef {}
// SAFETY: see `Send`.
unsafe impl Sync for XprtRef {}

impl XprtRef {
    /// # Safety
    ///
    /// `raw` is a `Shell` made by [`new_xprt`], not yet freed.
    unsafe fn new(raw: NonNull<sys::rpc_xprt>) -> Self {
        // SAFETY: per the contract.
        unsafe { (*raw.as_ptr().cast::<Shell>()).refs.fetch_add(1, Ordering::Relaxed) };
        // INVARIANT: counted above.
        XprtRef { raw }
    }

    /// The transport, for as long as this is borrowed.
    #[inline]
    pub(crate) fn get(&self) -> Xprt<'_> {
        // INVARIANT: counted, the transport is not freed while `self` lives.
        Xprt { raw: self.raw, _life: PhantomData }
    }
}

impl Clone for XprtRef {
    fn clone(&self) -> Self {
        // SAFETY: live while `self` is (type invariant).
        unsafe { XprtRef::new(self.raw) }
    }
}

impl Drop for XprtRef {
    fn drop(&mut self) {
        // SAFETY: counted by this value (type invariant): the shell is live.
        unsafe { (*self.raw.as_ptr().cast::<Shell>()).refs.fetch_sub(1, Ordering::Release) };
    }
}

/// Whether no [`XprtRef`] of the transport at `xprt` (a live `Shell`) is
/// left.
pub(super) fn no_refs(xprt: NonNull<sys::rpc_xprt>) -> bool {
    // SAFETY: a live `Shell` (the caller's word); only the count is read.
    unsafe { (*xprt.as_ptr().cast::<Shell>()).refs.load(Ordering::Acquire) == 0 }
}

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
///
/// # Invariants
///
/// Plain integers, never written after construction (no method takes
/// `&mut self`; SUNRPC only reads the table).
pub(crate) struct RpcTimeout(sys::rpc_timeout);

// SAFETY: plain integers, never written after construction (type
// invariant).
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
    pub(super) raw: NonNull<sys::rpc_xprt>,
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
    args: &CreateArgs<'_>,
    module: &'static ThisModule,
    params: &XprtParams,
    netid: &'static CStr,
    make: impl FnOnce(XprtRef) -> Result<Arc<T>>,
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
    // SAFETY: `xprt` is allocated with room for a `Shell`; its count
    // starts at zero.
    unsafe { ptr::addr_of_mut!((*xprt.as_ptr().cast::<Shell>()).refs).write(AtomicUsize::new(0)) };
    // Until `make` returns, this call's own view of the transport.
    let handle: Xprt<'_> = Xprt { raw: xprt, _life: PhantomData };
    if handle.port() != 0 {
        // SAFETY: valid transport.
        unsafe { sys::rpcrdma_rs_xprt_set_bound(xprt.as_ptr()) };
    }
    let fail = |e: Error| {
        if !no_refs(xprt) {
            // `make` kept a reference: the memory stays (and the module).
            pr_err!("transport setup failed with the transport still referenced: leaking it\n");
            return e;
        }
        handle.free_addresses();
        // SAFETY: allocated above, never handed to SUNRPC, and no
        // `XprtRef` is left.
        unsafe { sys::xprt_free(xprt.as_ptr()) };
        put_module();
        e
    };
    if let Err(e) = handle.format_addresses(netid) {
        return Err(fail(e));
    }
    // SAFETY: a `Shell`, freed only by `fail` (below, when `make` fails,
    // after the value and any clone were dropped) or by `destroy`.
    let transport = match make(unsafe { XprtRef::new(xprt) }) {
        Ok(t) => t,
        Err(e) => return Err(fail(e)),
    };
    // SAFETY: `xprt` was allocated with room for a `Shell`. The shell owns
    // one reference of the transport until `destroy`.
    unsafe { (*xprt.as_ptr().cast::<Shell>()).transport = Arc::into_raw(transport).cast() };
    // INVARIANT: allocated, set up and given its transport above.
    Ok(NewXprt { raw: xprt })
}

/// Checks, where [`new_bc_xprt`] is used, that its transport closes
/// without the send lock.
struct ClosesUnlocked<T>(PhantomData<T>);

impl<T: Transport> ClosesUnlocked<T> {
    const OK: () = assert!(
        T::HAS_CLOSE_UNLOCKED,
        "a server's backchannel is closed without the send lock: implement close_unlocked"
    );
}

/// A backchannel transport for `args` (SUNRPC asks for one for a server
/// transport, `args.bc_xprt`, when NFSv4.1 makes its callback client): as
/// [`new_xprt`], `make` also given the server transport, if it is one of
/// `S`'s class (`EPROTONOSUPPORT` if not); then made the server
/// transport's, bound and connected (SUNRPC's callback clients find it
/// there; the server transport drops its reference when it is freed).
/// `EEXIST` if the server transport has one already.
pub(crate) fn new_bc_xprt<T: Transport, S: SvcTransport>(
    args: &CreateArgs<'_>,
    module: &'static ThisModule,
    params: &XprtParams,
    netid: &'static CStr,
    make: impl FnOnce(XprtRef, Arc<S>) -> Result<Arc<T>>,
) -> Result<NewXprt> {
    #[allow(clippy::let_unit_value)]
    let () = ClosesUnlocked::<T>::OK;
    let svc = args.raw().bc_xprt;
    if svc.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the callback client being made holds a reference of the
    // server transport (nfsd's connection record) for the call.
    let owner = unsafe { crate::kapi::svc::owner_arc::<S>(svc) }.ok_or_else(crate::kapi::errno::EPROTONOSUPPORT)?;
    // SAFETY: live for the call (see above); the helper reads one field.
    if unsafe { sys::rpcrdma_rs_svc_xprt_has_bc(svc) } {
        return Err(EEXIST);
    }
    let new = new_xprt::<T>(args, module, params, netid, |r| make(r, owner))?;
    // SAFETY: both live; the new transport is nobody else's yet. (Two
    // made at once for one server transport: the later one is kept, the
    // earlier one's reference leaks.)
    unsafe { sys::rpcrdma_rs_link_bc_xprt(svc, new.raw.as_ptr()) };
    Ok(new)
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
    pub(super) unsafe fn transport<T: Transport>(raw: *mut sys::rpc_xprt) -> (Xprt<'a>, &'a T) {
        // SAFETY: per the contract, `raw` is a `Shell` whose `transport` is a
        // live `T` (set before SUNRPC could call any operation).
        unsafe {
            let t = &*(*raw.cast::<Shell>()).transport.cast::<T>();
            (Xprt { raw: NonNull::new_unchecked(raw), _life: PhantomData }, t)
        }
    }


    /// The raw pointer, for APIs that identify the transport by address.
    pub(crate) fn as_ptr(&self) -> *mut sys::rpc_xprt {
        self.raw.as_ptr()
    }

    /// The network namespace the transport lives in.
    pub(crate) fn net(&self) -> &'a Net {
        // SAFETY: a transport holds a reference on its namespace from
        // `xprt_alloc` until it is freed, after every user of `'a`.
        unsafe { Net::from_raw(read_once!((*self.raw.as_ptr()).xprt_net)) }
    }

    /// Hands the send lock `task` holds (in `connect`) to the transport,
    /// for its connect worker; `None` if `task` does not hold it.
    pub(crate) fn lock_connect(&self, task: &Task<'_>) -> Option<ConnectLock> {
        // SAFETY: valid transport and task; the cookie is an identity SUNRPC
        // only compares.
        let taken = unsafe { sys::xprt_lock_connect(self.raw.as_ptr(), task.as_ptr(), connect_cookie(self.raw)) };
        // SAFETY: SUNRPC now holds the lock for the cookie; it moves from
        // the task to the cookie once, so this is the only `ConnectLock`.
        taken.then(|| unsafe { ConnectLock::new(self.raw) })
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
    #[inline]
    pub(crate) fn connected(&self) -> bool {
        const CONNECTED: c_ulong = 1 << sys::XPRT_CONNECTED;
        // SAFETY: valid transport; the state word is read once, as
        // `test_bit` (SUNRPC's `xprt_connected`) reads it, while others
        // change its bits atomically.
        let state = unsafe { core::ptr::read_volatile(&raw const (*self.raw.as_ptr()).state) };
        state & CONNECTED != 0
    }

    /// How many tasks wait for a reply (read without the queue's lock: a
    /// hint, good for deciding whether replies are overdue).
    pub(crate) fn replies_awaited(&self) -> u32 {
        // SAFETY: valid transport; the helper only reads a counter.
        unsafe { sys::rpcrdma_rs_xprt_pending_len(self.raw.as_ptr()) }
    }

    /// Ends a connect attempt: clears CONNECTING, gives the send lock
    /// back (`lock`, from [`Xprt::lock_connect`]) and wakes waiting tasks
    /// with `status`.
    pub(crate) fn connect_finished(&self, lock: ConnectLock, status: Result) {
        let status = match status {
            Ok(()) => -(sys::EAGAIN as c_int),
            Err(e) => e.to_errno(),
        };
        self.end_connect(Some(lock), status);
    }

    /// Ends a connect that could not start (no [`ConnectLock`]): clears
    /// CONNECTING and wakes waiting tasks with `status`.
    pub(crate) fn connect_not_started(&self, status: Error) {
        self.end_connect(None, status.to_errno());
    }

    /// Clears CONNECTING, gives the send lock back if `lock` holds it, and
    /// wakes waiting tasks with `status` (an errno).
    fn end_connect(&self, lock: Option<ConnectLock>, status: c_int) {
        // SAFETY: valid transport.
        unsafe { sys::rpcrdma_rs_xprt_clear_connecting(self.raw.as_ptr()) };
        drop(lock);
        // SAFETY: valid transport.
        unsafe { sys::xprt_wake_pending_tasks(self.raw.as_ptr(), status) };
    }

    /// Records a successful connection in the transport's statistics.
    /// The holder of the send lock (the connect worker) writes them; a
    /// proof of another transport's lock changes nothing.
    pub(crate) fn count_connect(&self, locked: &SendLocked<'_>) {
        if !locked.holds(self.raw) {
            return;
        }
        let x = self.raw.as_ptr();
        // SAFETY: these counters belong to the transport, and its send
        // lock, whose proof the caller holds (checked), serialises their writers
        // (SUNRPC reads them for statistics only); each is written through
        // the pointer.
        unsafe {
            let cookie = core::ptr::addr_of_mut!((*x).connect_cookie);
            *cookie = (*cookie).wrapping_add(1);
            let count = core::ptr::addr_of_mut!((*x).stat.connect_count);
            *count = (*count).wrapping_add(1);
            let now = core::ptr::read_volatile(&raw const sys::jiffies);
            let start = read_once!((*x).stat.connect_start);
            let time = core::ptr::addr_of_mut!((*x).stat.connect_time);
            *time = (*time).wrapping_add(now.wrapping_sub(start));
        }
    }

    /// Reports the connection lost and wakes tasks to retransmit (`close`,
    /// with the send lock; a proof of another transport's lock changes
    /// nothing).
    pub(crate) fn disconnect_done(&self, locked: &mut SendLocked<'_>) {
        if !locked.holds(self.raw) {
            return;
        }
        let x = self.raw.as_ptr();
        // SAFETY: valid transport; its send lock (proof above, checked)
        // serialises the writers of these fields, each written through the
        // pointer.
        unsafe {
            *core::ptr::addr_of_mut!((*x).reestablish_timeout) = 0;
            let cookie = core::ptr::addr_of_mut!((*x).connect_cookie);
            *cookie = (*cookie).wrapping_add(1);
            sys::xprt_disconnect_done(x);
        }
    }

    /// Marks the transport disconnected and fails the tasks waiting for
    /// replies with `ENOTCONN` (SUNRPC takes its own lock): a server's
    /// backchannel whose connection went.
    pub(crate) fn mark_disconnected(&self) {
        // SAFETY: valid transport; the function takes transport_lock.
        unsafe { sys::xprt_disconnect_done(self.raw.as_ptr()) }
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
    /// The connect lock (the send lock, handed to the transport) keeps the
    /// reconnect state the caller's.
    pub(crate) fn reconnect_delay(&self, lock: &ConnectLock, initial: u64) -> u64 {
        if !lock.holds(self.raw) {
            return initial;
        }
        // SAFETY: valid transport; its send lock is held (the proof,
        // checked).
        unsafe {
            let d = sys::xprt_reconnect_delay(self.raw.as_ptr());
            sys::xprt_reconnect_backoff(self.raw.as_ptr(), initial as c_ulong);
            d as u64
        }
    }

    /// Data arrived: the next reconnect need not wait.
    pub(crate) fn clear_reestablish_timeout(&self) {
        // SAFETY: a word the transport owns that SUNRPC reads and writes
        // without a lock; written once, as C's `WRITE_ONCE` writes it (the
        // in-tree transport does the same).
        unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!((*self.raw.as_ptr()).reestablish_timeout), 0) };
    }

    /// Finds the request with `xid` (network order) and pins it.
    pub(crate) fn lookup(&self, xid_be: u32) -> Option<PinnedRqst> {
        // SAFETY: valid transport; the helper takes queue_lock.
        let raw = unsafe { sys::rpcrdma_rs_lookup_and_pin_rqst(self.raw.as_ptr(), xid_be) };
        NonNull::new(raw).map(|raw| PinnedRqst { raw, done: false })
    }

    /// SUNRPC's counters for the transport (for mountstats).
    pub(crate) fn stat(&self) -> XprtStat {
        let x = self.raw.as_ptr();
        // SAFETY (of the reads): valid transport; counters SUNRPC updates
        // under its own locks, each read once.
        XprtStat {
            bind_count: read_once!((*x).stat.bind_count) as u64,
            connect_count: read_once!((*x).stat.connect_count) as u64,
            connect_time: read_once!((*x).stat.connect_time) as u64,
            sends: read_once!((*x).stat.sends) as u64,
            recvs: read_once!((*x).stat.recvs) as u64,
            bad_xids: read_once!((*x).stat.bad_xids) as u64,
            req_u: read_once!((*x).stat.req_u),
            bklog_u: read_once!((*x).stat.bklog_u),
        }
    }

    /// Whether SUNRPC wants the transport connected at all (`connect_cookie`).
    pub(crate) fn connect_cookie(&self) -> u32 {
        // SAFETY (of the read): valid transport.
        read_once!((*self.raw.as_ptr()).connect_cookie)
    }

    /// When the transport was last used (jiffies).
    pub(crate) fn last_used(&self) -> u64 {
        // SAFETY (of the read): valid transport.
        read_once!((*self.raw.as_ptr()).last_used) as u64
    }
}
