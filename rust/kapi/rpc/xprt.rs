// SPDX-License-Identifier: GPL-2.0

//! A transport SUNRPC created through this module (`struct rpc_xprt`):
//! [`new_xprt`], the [`Xprt`] handle the callbacks get, and the SUNRPC calls
//! a transport makes on itself (state, congestion window, addresses).

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{
    error::{Error, Result},
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
    ThisModule,
};

use super::{connect_cookie, ConnectLock, CreateArgs, OpsTable, PinnedRqst, Task, Transport};
use crate::kapi::{
    compat, errno,
    net::{Net, SockAddr},
    FmtBuf,
};
use crate::sys;

/// `struct rpc_xprt` followed by the pointer to its Rust transport object.
#[repr(C)]
pub(super) struct Shell {
    pub(super) xprt: sys::rpc_xprt,
    pub(super) transport: *const c_void,
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
    pub(super) raw: NonNull<sys::rpc_xprt>,
    pub(super) _life: PhantomData<&'a sys::rpc_xprt>,
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
    pub(super) unsafe fn transport<T: Transport>(raw: *mut sys::rpc_xprt) -> (Xprt<'a>, &'a T) {
        // SAFETY: per the contract, `raw` is a `Shell` whose `transport` is a
        // live `T` (set before SUNRPC could call any operation).
        unsafe {
            let t = &*(*raw.cast::<Shell>()).transport.cast::<T>();
            (Xprt { raw: NonNull::new_unchecked(raw), _life: PhantomData }, t)
        }
    }

    pub(super) fn get(&self) -> &sys::rpc_xprt {
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
    pub(super) fn set_port(&self, port: u16) {
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
        let mut dec = FmtBuf::<8>::new();
        let mut hex = FmtBuf::<8>::new();
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
        let mut hex = FmtBuf::<40>::new();
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
                _ => return Err(errno::EAFNOSUPPORT()),
            }
        }
        ok &= self.replace_address(sys::rpc_display_format_t_RPC_DISPLAY_HEX_ADDR, hex.as_bytes());
        // PROTO and NETID point at static strings, like the in-tree client's.
        let x = self.raw.as_ptr();
        // SAFETY: the slots exist (RPC_DISPLAY_MAX entries); static strings
        // are never freed (see `free_addresses`).
        unsafe {
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_PROTO as usize] =
                compat::cstr_ptr(kernel::c_str!("rdma"));
            (*x).address_strings[sys::rpc_display_format_t_RPC_DISPLAY_NETID as usize] = compat::cstr_ptr(netid);
        }
        self.set_port(self.port());
        if ok {
            Ok(())
        } else {
            Err(ENOMEM)
        }
    }

    /// Frees the kstrdup'ed display strings.
    pub(super) fn free_addresses(&self) {
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

/// Room for an IPv6 address with a scope and the NUL.
const ADDR_TEXT_LEN: usize = 64;

/// A transport's peer address as text, copied out of the transport (see
/// [`Xprt::addr_str`]); prints as the address.
pub(crate) struct AddrText {
    buf: [u8; ADDR_TEXT_LEN],
}

compat::printable!(AddrText);

impl AddrText {
    /// The text as a C string (NUL-terminated: the copy leaves room for
    /// the NUL), for C.
    pub(crate) fn as_c_ptr(&self) -> *const kernel::ffi::c_char {
        self.buf.as_ptr().cast()
    }
}

impl core::fmt::Display for AddrText {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = self.buf.iter().position(|&b| b == 0).unwrap_or(self.buf.len());
        f.write_str(core::str::from_utf8(&self.buf[..len]).unwrap_or("?"))
    }
}
