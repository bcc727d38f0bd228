// SPDX-License-Identifier: GPL-2.0

//! The module's trace events (trace system `rpcrdma_rs`), one function per
//! event. The events are defined in C (`rust/rpcrdma_rs_trace.h`, created
//! in `rust/tracepoints.c`, as binder's are); the functions here test the
//! event's static key inline and call the C forward only when the event is
//! enabled, so a disabled event costs what a disabled C tracepoint costs:
//! a patched jump where the kernel has jump labels, by the kernel crate's
//! `static_branch_unlikely!` (7.x) or, on x86-64 with a compiler that takes
//! asm goto, by the module's own (6.12); else one load, test and branch,
//! which is what C's `static_key_false()` does without jump labels.
//! Arguments that cost something to build (the peer's address text) are
//! given as closures and built only for an enabled event.
//!
//! On a kernel built without tracepoints every function is empty.

use crate::kapi::rpc::{AddrText, Rqst};
use kernel::str::CStr;

/// How a call's message or its reply travels (the `rtype` and `wtype` of
/// [`marshal`] and [`reply`]; the values of the header's symbolic names).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum ChunkType {
    /// In the Send (or the Receive), copied.
    Inline = 0,
    /// Copied into the Send from several parts of the call.
    Pullup = 1,
    /// Head and tail copied, page list mapped in place.
    Mapped = 2,
    /// The page list in a Read chunk.
    ReadList = 3,
    /// The whole call in a Position-Zero Read chunk (RDMA_NOMSG).
    LongCall = 4,
    /// The reply's payload in a Write chunk.
    WriteList = 5,
    /// The whole reply in a Reply chunk.
    ReplyChunk = 6,
}

/// What [`version`] reports.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum VersionEvent {
    /// A call went out as the Version Two probe.
    Probe = 0,
    /// The server answered the probe in Version Two.
    Accepted = 1,
    /// The server refused it: the call goes again as Version One.
    Fallback = 2,
    /// The connection's version is settled.
    Settled = 3,
}

#[cfg(CONFIG_TRACEPOINTS)]
mod keys {
    //! The events' `struct tracepoint`s, defined by `rust/tracepoints.c`.
    //! Declared by hand with the kernel crate's type for them (the module's
    //! own bindings would make another type, which
    //! `static_branch_unlikely!` does not take).
    macro_rules! tracepoints {
        ($($name:ident),* $(,)?) => {
            // Only their addresses are taken (a field of the kernel's type
            // is not FFI-safe on 7.x; none is passed by value).
            #[allow(improper_ctypes)]
            extern "C" {
                $(pub(super) static mut $name: kernel::bindings::tracepoint;)*
            }
        };
    }
    tracepoints!(
        __tracepoint_rpcrdma_rs_connect,
        __tracepoint_rpcrdma_rs_reject,
        __tracepoint_rpcrdma_rs_disconnect,
        __tracepoint_rpcrdma_rs_established,
        __tracepoint_rpcrdma_rs_marshal,
        __tracepoint_rpcrdma_rs_marshal_failed,
        __tracepoint_rpcrdma_rs_mr_map,
        __tracepoint_rpcrdma_rs_mr_localinv,
        __tracepoint_rpcrdma_rs_mr_reminv,
        __tracepoint_rpcrdma_rs_wc_send,
        __tracepoint_rpcrdma_rs_wc_receive,
        __tracepoint_rpcrdma_rs_reply,
        __tracepoint_rpcrdma_rs_credits,
        __tracepoint_rpcrdma_rs_bad_reply,
        __tracepoint_rpcrdma_rs_err,
        __tracepoint_rpcrdma_rs_cb_call,
        __tracepoint_rpcrdma_rs_cb_reply,
        __tracepoint_rpcrdma_rs_version,
        __tracepoint_rpcrdma_rs_xchar,
        __tracepoint_rpcrdma_rs_probe,
        __tracepoint_rpcrdma_rs_mrs_refresh,
        __tracepoint_rpcrdma_rs_svc_accept,
        __tracepoint_rpcrdma_rs_svc_call,
        __tracepoint_rpcrdma_rs_svc_reply,
        __tracepoint_rpcrdma_rs_svc_err,
        __tracepoint_rpcrdma_rs_svc_cb_call,
        __tracepoint_rpcrdma_rs_svc_cb_reply,
    );
}

/// x86-64's `arch_static_branch()` for a tracepoint's key, where the
/// kernel crate has no `static_branch_unlikely!` (6.12) and the compiler
/// takes asm goto: the form of `arch/x86/include/asm/jump_label.h` without
/// objtool's jump hack, a five-byte NOP (the kernel's `x86_nops[5]`, which
/// its patching expects) that the kernel turns into a jump to the enabled
/// path while the event is enabled, and the `__jump_table` entry that
/// tells it where: the NOP, the target, and the key (a
/// `static_key_false`, branch bit clear) relative to the entry.
///
/// # Safety
///
/// `$key` must be a `struct tracepoint` defined by C.
#[cfg(all(CONFIG_TRACEPOINTS, CONFIG_JUMP_LABEL, rpcrdma_asm_goto, target_arch = "x86_64"))]
macro_rules! x86_static_branch_unlikely {
    ($key:path) => {'branch: {
        core::arch::asm!(
            "2: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
            ".pushsection __jump_table, \"aw\"",
            ".balign 8",
            ".long 2b - .",
            ".long {yes} - .",
            ".quad {key} + {off} - .",
            ".popsection",
            key = sym $key,
            off = const core::mem::offset_of!(kernel::bindings::tracepoint, key),
            yes = label {
                break 'branch true;
            },
            options(att_syntax),
        );
        false
    }};
}

/// True if the event whose `struct tracepoint` is `$key` is enabled.
#[cfg(CONFIG_TRACEPOINTS)]
macro_rules! enabled {
    ($key:ident) => {{
        #[cfg(all(CONFIG_JUMP_LABEL, rpcrdma_static_branch))]
        // SAFETY: `$key` is a static key defined by C (`DEFINE_TRACE` in
        // rust/tracepoints.c), of the type the macro is given.
        let on = unsafe { kernel::jump_label::static_branch_unlikely!(keys::$key, kernel::bindings::tracepoint, key) };
        #[cfg(all(CONFIG_JUMP_LABEL, not(rpcrdma_static_branch), rpcrdma_asm_goto, target_arch = "x86_64"))]
        // SAFETY: as above.
        let on = unsafe { x86_static_branch_unlikely!(keys::$key) };
        #[cfg(not(all(CONFIG_JUMP_LABEL, any(rpcrdma_static_branch, all(rpcrdma_asm_goto, target_arch = "x86_64")))))]
        let on = {
            let tp = &raw const keys::$key;
            // SAFETY: the key of a live `struct tracepoint` (the module's
            // own, valid while its code runs) begins with its `atomic_t
            // enabled` on every supported line (`static_key`, or
            // `static_key_false` around one), which has `AtomicI32`'s
            // layout; the kernel changes it only atomically. Non-zero means
            // enabled or being enabled (-1), as `static_key_count()` reads it.
            let enabled = unsafe { &*core::ptr::addr_of!((*tp).key).cast::<core::sync::atomic::AtomicI32>() };
            enabled.load(core::sync::atomic::Ordering::Relaxed) != 0
        };
        on
    }};
}

/// Defines one function per event: `fn name(args) => key, forward;` tests
/// `key` and calls the C `forward` with the arguments, each passed through
/// its conversion (`|| peer` closures become the address text).
macro_rules! events {
    ($(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident: $ty:ty => $conv:ident),* $(,)?) => $key:ident, $fwd:ident;
    )*) => {$(
        $(#[$meta])*
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name($($arg: $ty),*) {
            #[cfg(CONFIG_TRACEPOINTS)]
            if enabled!($key) {
                $(conv!($conv, $arg);)*
                // SAFETY: the forward only reads its arguments; strings are
                // NUL-terminated and live until it returns.
                unsafe { crate::sys::$fwd($(pass!($conv, $arg)),*) };
            }
            #[cfg(not(CONFIG_TRACEPOINTS))]
            let _ = ($($arg,)*);
        }
    )*};
}

/// What [`marshal`] reports of a call.
pub(crate) struct Marshalled {
    /// The transport header's version and length.
    pub(crate) version: u32,
    pub(crate) hdrlen: u32,
    /// The call's head, page list and tail lengths.
    pub(crate) xdr: (u32, u32, u32),
    /// How the call and its reply travel.
    pub(crate) rtype: ChunkType,
    pub(crate) wtype: ChunkType,
    /// The reply buffer's head, page list and tail lengths and its
    /// `XDRBUF_*` flags, as the planner saw them.
    pub(crate) rcv: (u32, u32, u32),
    pub(crate) rcv_flags: u32,
}

/// A call's header was built and its Send posted (`what` is built only
/// when the event is enabled).
#[inline(always)]
pub(crate) fn marshal(rqst: &Rqst<'_>, xid: u32, what: impl FnOnce() -> Marshalled) {
    #[cfg(CONFIG_TRACEPOINTS)]
    if enabled!(__tracepoint_rpcrdma_rs_marshal) {
        let (task_id, client_id) = rqst.task_ids();
        let m = what();
        let info = crate::sys::rpcrdma_rs_marshal_info {
            task_id,
            client_id,
            xid,
            version: m.version,
            hdrlen: m.hdrlen,
            headlen: m.xdr.0,
            pagelen: m.xdr.1,
            taillen: m.xdr.2,
            rtype: m.rtype as u32,
            wtype: m.wtype as u32,
            rcvhead: m.rcv.0,
            rcvpages: m.rcv.1,
            rcvtail: m.rcv.2,
            rcvflags: m.rcv_flags,
            flavor: rqst.auth_flavor(),
            ddp: u32::from(rqst.ddp_allowed()),
        };
        // SAFETY: the forward only reads the value, during the call.
        unsafe { crate::sys::rpcrdma_rs_trace_marshal(&info) };
    }
    #[cfg(not(CONFIG_TRACEPOINTS))]
    let _ = (rqst, xid, what);
}

/// Binds an argument's value for the call (`peer` closures are run here).
macro_rules! conv {
    (val, $a:ident) => {};
    (peer, $a:ident) => {
        let $a: AddrText = $a();
    };
    (cstr, $a:ident) => {};
}

/// The argument as the C forward takes it.
macro_rules! pass {
    (val, $a:ident) => {
        $a
    };
    (peer, $a:ident) => {
        $a.as_c_ptr()
    };
    (cstr, $a:ident) => {
        crate::kapi::compat::cstr_ptr($a)
    };
}

events! {
    /// A connection attempt ended: `status` 0 (established) or -errno.
    fn connect(peer: impl FnOnce() -> AddrText => peer, status: i32 => val)
        => __tracepoint_rpcrdma_rs_connect, rpcrdma_rs_trace_connect;
    /// The server refused the connection (`status`: the CM's reject reason).
    fn reject(peer: impl FnOnce() -> AddrText => peer, status: i32 => val)
        => __tracepoint_rpcrdma_rs_reject, rpcrdma_rs_trace_reject;
    /// The connection went down (`status`: why, -errno).
    fn disconnect(peer: impl FnOnce() -> AddrText => peer, status: i32 => val)
        => __tracepoint_rpcrdma_rs_disconnect, rpcrdma_rs_trace_disconnect;
    /// Established, with what was negotiated.
    fn established(
        peer: impl FnOnce() -> AddrText => peer,
        version: u32 => val,
        inline_send: u32 => val,
        inline_recv: u32 => val,
        credits: u32 => val,
        remote_inv: u32 => val,
    ) => __tracepoint_rpcrdma_rs_established, rpcrdma_rs_trace_established;
    /// A call could not be marshalled (`ret`: -errno).
    fn marshal_failed(xid: u32 => val, ret: i32 => val)
        => __tracepoint_rpcrdma_rs_marshal_failed, rpcrdma_rs_trace_marshal_failed;
    /// A memory region registered for a call's chunk (`dir`: 0 the peer
    /// reads it, 1 the peer writes it).
    fn mr_map(
        xid: u32 => val,
        mr_id: u32 => val,
        nents: i32 => val,
        handle: u32 => val,
        length: u32 => val,
        offset: u64 => val,
        dir: u32 => val,
    ) => __tracepoint_rpcrdma_rs_mr_map, rpcrdma_rs_trace_mr_map;
    /// A region invalidated by our LOCAL_INV.
    fn mr_localinv(mr_id: u32 => val, handle: u32 => val)
        => __tracepoint_rpcrdma_rs_mr_localinv, rpcrdma_rs_trace_mr_localinv;
    /// A region the peer invalidated (Send With Invalidate).
    fn mr_reminv(mr_id: u32 => val, handle: u32 => val)
        => __tracepoint_rpcrdma_rs_mr_reminv, rpcrdma_rs_trace_mr_reminv;
    /// A signalled Send completed (`cid`: its buffer).
    fn wc_send(cid: u32 => val, status: u32 => val, vendor_err: u32 => val, received: u32 => val)
        => __tracepoint_rpcrdma_rs_wc_send, rpcrdma_rs_trace_wc_send;
    /// A Receive completed (`cid`: its buffer; `received`: bytes).
    fn wc_receive(cid: u32 => val, status: u32 => val, vendor_err: u32 => val, received: u32 => val)
        => __tracepoint_rpcrdma_rs_wc_receive, rpcrdma_rs_trace_wc_receive;
    /// A reply matched its call.
    fn reply(xid: u32 => val, credits: u32 => val, wtype: u32 => val, written: u32 => val)
        => __tracepoint_rpcrdma_rs_reply, rpcrdma_rs_trace_reply;
    /// The credit limit changed.
    fn credits(xid: u32 => val, old: u32 => val, credits: u32 => val)
        => __tracepoint_rpcrdma_rs_credits, rpcrdma_rs_trace_credits;
    /// A received message was dropped or failed its RPC, and why.
    fn bad_reply(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val, why: &CStr => cstr)
        => __tracepoint_rpcrdma_rs_bad_reply, rpcrdma_rs_trace_bad_reply;
    /// An RDMA_ERROR arrived (`err`: 1 ERR_VERS with its range, 2 ERR_CHUNK).
    fn err(xid: u32 => val, err: u32 => val, min: u32 => val, max: u32 => val)
        => __tracepoint_rpcrdma_rs_err, rpcrdma_rs_trace_err;
    /// A backward call arrived.
    fn cb_call(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val)
        => __tracepoint_rpcrdma_rs_cb_call, rpcrdma_rs_trace_cb_call;
    /// A backward call's reply was sent.
    fn cb_reply(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val)
        => __tracepoint_rpcrdma_rs_cb_reply, rpcrdma_rs_trace_cb_reply;
    /// Version negotiation (`what`: a [`VersionEvent`]).
    fn version(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val, what: u32 => val, version: u32 => val)
        => __tracepoint_rpcrdma_rs_version, rpcrdma_rs_trace_version;
    /// A transport characteristics message sent (`dir` 0) or received (1);
    /// `op` 0 malformed, 1 INITXCH, 2 UPDXCH, 3 REQXCH, 4 RESPXCH.
    fn xchar(peer: impl FnOnce() -> AddrText => peer, dir: u32 => val, xid: u32 => val, op: u32 => val)
        => __tracepoint_rpcrdma_rs_xchar, rpcrdma_rs_trace_xchar;
    /// A liveness probe posted (`status` 1), answered (0) or failed (-errno).
    fn probe(peer: impl FnOnce() -> AddrText => peer, status: i32 => val)
        => __tracepoint_rpcrdma_rs_probe, rpcrdma_rs_trace_probe;
    /// Memory regions made on demand: `made` now, `total` in all.
    fn mrs_refresh(peer: impl FnOnce() -> AddrText => peer, made: u32 => val, total: u32 => val)
        => __tracepoint_rpcrdma_rs_mrs_refresh, rpcrdma_rs_trace_mrs_refresh;
    /// The server accepted a connection (`status` 0) or refused it
    /// (-errno).
    fn svc_accept(peer: impl FnOnce() -> AddrText => peer, status: i32 => val)
        => __tracepoint_rpcrdma_rs_svc_accept, rpcrdma_rs_trace_svc_accept;
    /// The server took a call (`rtype`: a [`ChunkType`], `len`: bytes
    /// inline).
    fn svc_call(xid: u32 => val, version: u32 => val, rtype: u32 => val, len: u32 => val)
        => __tracepoint_rpcrdma_rs_svc_call, rpcrdma_rs_trace_svc_call;
    /// The server sent a reply (`wtype`: a [`ChunkType`]; `inv`: the
    /// handle its Send invalidates, 0 for none).
    fn svc_reply(xid: u32 => val, wtype: u32 => val, len: u32 => val, inv: u32 => val)
        => __tracepoint_rpcrdma_rs_svc_reply, rpcrdma_rs_trace_svc_reply;
    /// The server sent an RDMA_ERROR (`err` as in [`err`]).
    fn svc_err(xid: u32 => val, err: u32 => val, min: u32 => val, max: u32 => val)
        => __tracepoint_rpcrdma_rs_svc_err, rpcrdma_rs_trace_svc_err;
    /// The server sent a callback.
    fn svc_cb_call(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val)
        => __tracepoint_rpcrdma_rs_svc_cb_call, rpcrdma_rs_trace_svc_cb_call;
    /// A callback's reply completed it.
    fn svc_cb_reply(peer: impl FnOnce() -> AddrText => peer, xid: u32 => val)
        => __tracepoint_rpcrdma_rs_svc_cb_reply, rpcrdma_rs_trace_svc_cb_reply;
}
