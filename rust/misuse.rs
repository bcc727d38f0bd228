// SPDX-License-Identifier: GPL-2.0

//! Misuses the module's types refuse at compile time, one per `misuse`
//! cfg value: `make misuse` (`scripts/misuse.sh`) compiles the module once
//! with each and expects the error named on its `// misuse:` line, in this
//! file, and no other. `control` compiles: the harness is shown to build
//! the module with a snippet that breaks no rule. Built only with
//! `--cfg rpcrdma_misuse`; never part of the module.
//!
//! The misuses are those of the review that made kapi sound (issue 54,
//! S1 to S9); Documentation/design.rst says which ones only run time can
//! refuse, and the tests that show it.

#![allow(dead_code, unused_imports, unused_variables, unreachable_code, clippy::all)]

use kernel::prelude::*;

use crate::{
    kapi::{
        cell::{Lease, LeaseCell},
        ib::{
            Conn, ConnBox, ConnHandle, Copying, Events, InFlight, Lender, Mapping, Registration, Released, RemoteInv,
            SendWriter, SgWriter,
        },
        net::Net,
        page::{Inbound, OwnedPage, Outbound},
        rpc::{LentRqst, PinnedRqst, ReleasedRqst, RqstStorage, Xprt, XprtRef},
    },
    verbs::{ConnHandler, Connection},
};

// misuse: control ok
#[cfg(misuse = "control")]
fn control<T: ConnHandler>(conn: &Connection<T>, lender: &Lender, page: &OwnedPage) -> Result {
    let mut reg = conn.begin(lender)?;
    conn.register::<Inbound>(&mut reg, 0, |sg: &mut SgWriter<'_, Inbound>| sg.push(page.page_ref(), 64, 0))?;
    let _ = conn.release_unposted(lender, reg);
    Ok(())
}

// S1: a call's page (the peer only reads it) registered for the peer to
// write.
// misuse: s1_call_page_writable E0308 found `PageRef<'_, Outbound>`
#[cfg(misuse = "s1_call_page_writable")]
fn s1_call_page_writable<T: ConnHandler>(conn: &Connection<T>, reg: &mut Registration, rqst: &LentRqst<'_>) -> Result {
    let page = rqst.call_buf().page(0).ok_or(EINVAL)?;
    conn.register::<Inbound>(reg, 0, |sg: &mut SgWriter<'_, Inbound>| sg.push(page, 4096, 0)).map(|_| ())
}

// S1: a call's pages, in a run, registered for the peer to write.
// misuse: s1_call_run_writable E0308 found `PageRun<'_, Outbound>`
#[cfg(misuse = "s1_call_run_writable")]
fn s1_call_run_writable<T: ConnHandler>(conn: &Connection<T>, reg: &mut Registration, rqst: &LentRqst<'_>) -> Result {
    let run = rqst.call_buf().page_run(0, 1).ok_or(EINVAL)?;
    conn.register::<Inbound>(reg, 0, |sg: &mut SgWriter<'_, Inbound>| sg.push_run(run, 0, 4096)).map(|_| ())
}

// S1: a reply's page (the peer writes it) mapped into a Send.
// misuse: s1_reply_page_sent E0308 found `PageRef<'_, Inbound>`
#[cfg(misuse = "s1_reply_page_sent")]
fn s1_reply_page_sent<T: ConnHandler>(conn: &Connection<T>, reg: Registration, rqst: &LentRqst<'_>) -> Result {
    let page = rqst.reply_buf().page(0).ok_or(EINVAL)?;
    conn.send(reg, |out: &mut SendWriter<'_, Mapping>| out.map_page(page, 0, 4096)).map(|_| ()).map_err(|f| f.err)
}

// S1: a Send without a token mapping pages (nothing would say when the
// device is done with them).
// misuse: s1_map_without_token E0599 no method named `map_page`
#[cfg(misuse = "s1_map_without_token")]
fn s1_map_without_token<T: ConnHandler>(conn: &Connection<T>, page: &OwnedPage) -> Result {
    conn.send_copied(|out: &mut SendWriter<'_, Copying>| out.map_page(page.page_ref(), 0, 64))
}

// S1: a page handed out as a reference with no lifetime or owner.
// misuse: s1_forge_page E0451
#[cfg(misuse = "s1_forge_page")]
fn s1_forge_page(p: core::ptr::NonNull<crate::sys::page>) -> crate::kapi::page::PageRef<'static, Inbound> {
    crate::kapi::page::PageRef { ptr: p, owner: 0, _life: core::marker::PhantomData }
}

// S1: a run of pages made up from a raw array.
// misuse: s1_forge_run E0451
#[cfg(misuse = "s1_forge_run")]
fn s1_forge_run(p: *const *mut crate::sys::page) -> crate::kapi::page::PageRun<'static, Inbound> {
    crate::kapi::page::PageRun { pages: p, n: 1, owner: 0, _life: core::marker::PhantomData }
}

// S2: a proof made out of nothing.
// misuse: s2_forge_released E0451
#[cfg(misuse = "s2_forge_released")]
fn s2_forge_released() -> Released {
    Released { lender: 1 }
}

// S2: a token that holds nothing, to split into a proof.
// misuse: s2_empty_token E0599 named `none` found for struct `InFlight`
#[cfg(misuse = "s2_empty_token")]
fn s2_empty_token() -> InFlight {
    InFlight::none()
}

// S2: a lender given back without its token's work done.
// misuse: s2_give_back E0624
#[cfg(misuse = "s2_give_back")]
fn s2_give_back(lender: &Lender) -> Released {
    // SAFETY: none: the call itself is refused.
    unsafe { lender.give_back() }
}

// S2: a request completed with a proof it was not given.
// misuse: s2_complete_unreleased E0624
#[cfg(misuse = "s2_complete_unreleased")]
fn s2_complete_unreleased(rqst: PinnedRqst, closed: crate::kapi::ib::Closed<'_>) {
    ReleasedRqst::new(rqst, closed).complete_with(&[]);
}

// S2: a Send With Invalidate no Receive reported, made up to skip the
// LOCAL_INV of a region the peer can still write.
// misuse: s2_forge_remote_inv E0451
#[cfg(misuse = "s2_forge_remote_inv")]
fn s2_forge_remote_inv(rkey: u32) -> RemoteInv {
    RemoteInv { rkey, conn: 1, sent: u64::MAX }
}

// S2: a token's regions counted as invalidated by the peer without
// `release`, which alone checks the remote invalidation is the token's
// connection's and came after its Send.
// misuse: s2_invalidated_remotely E0624
#[cfg(misuse = "s2_invalidated_remotely")]
fn s2_invalidated_remotely<V: Events>(conn: &Conn<V>, t: &InFlight) -> Option<usize> {
    conn.invalidated_remotely(t, None)
}

// S2: a request completed after its storage (and the lender it keeps
// closed meanwhile) went: the completion borrows the storage.
// misuse: s2_released_outlives_storage E0515
#[cfg(misuse = "s2_released_outlives_storage")]
fn s2_released_outlives_storage(storage: RqstStorage, rqst: PinnedRqst) -> Option<ReleasedRqst<'static>> {
    let closed = storage.lender().close_idle()?;
    storage.released(rqst, closed).ok()
}

// S3: a connection's identity passed in by its owner.
// misuse: s3_pass_identity E0061 takes 2 arguments but 3
#[cfg(misuse = "s3_pass_identity")]
fn s3_pass_identity<T: ConnHandler>(net: &Net, handler: kernel::sync::Arc<T>) -> Result {
    Connection::new(net, handler, 42).map(|_| ())
}

// S3: an identity made up.
// misuse: s3_forge_handle E0624
#[cfg(misuse = "s3_forge_handle")]
fn s3_forge_handle() -> Result<kernel::sync::Arc<ConnHandle>> {
    ConnHandle::new()
}

// S3: a token of another lender or connection made up.
// misuse: s3_forge_token E0451
#[cfg(misuse = "s3_forge_token")]
fn s3_forge_token() -> InFlight {
    InFlight { lender: 1, conn: 1, head: 0, count: 1, mapped: false, seq: 0 }
}

// S4: the request's memory reached behind its storage.
// misuse: s4_request_field E0616
#[cfg(misuse = "s4_request_field")]
fn s4_request_field(s: &RqstStorage) {
    let _ = &s.rqst;
}

// S6: the whole `rpc_rqst` behind a request, which SUNRPC changes under
// locks of its own.
// misuse: s6_whole_rqst E0616
#[cfg(misuse = "s6_whole_rqst")]
fn s6_whole_rqst(r: &crate::kapi::rpc::Rqst<'_>) -> core::ptr::NonNull<crate::sys::rpc_rqst> {
    r.raw
}

// S5: a transport that answers which buffers to free.
// misuse: s5_release_bool E0053
#[cfg(misuse = "s5_release_bool")]
mod s5_release_bool {
    use crate::kapi::rpc::{FreedRqst, Lent, Rqst, RqstStorage, SendLocked, Task, Transport, Xprt};
    use kernel::prelude::*;

    struct T;

    #[vtable]
    impl Transport for T {
        fn alloc_slot(&self, _x: Xprt<'_>, _t: &Task<'_>) {}
        fn free_slot(&self, _x: Xprt<'_>, _r: FreedRqst<'_>) {}
        fn storage<'a>(&'a self, _r: &Rqst<'_>) -> Option<&'a RqstStorage> {
            None
        }
        fn release_request(&self, _x: Xprt<'_>, _r: &Rqst<'_>) -> bool {
            true
        }
        fn connect(_t: Lent<'_, Self>, _x: Xprt<'_>, _task: &Task<'_>) {}
        fn close(&self, _x: Xprt<'_>, _l: &mut SendLocked<'_>) {}
        fn send_request(_t: Lent<'_, Self>, _x: Xprt<'_>, _r: &Rqst<'_>, _l: &mut SendLocked<'_>) -> Result {
            Ok(())
        }
        fn shutdown(&self, _x: Xprt<'_>, _l: &mut SendLocked<'_>) {}
    }
}

// S5: a transport that answers whether it provided a request's buffers
// (unsafe code would trust the answer): the storage provides them.
// misuse: s5_provide_buffers_bool E0407,E0438
#[cfg(misuse = "s5_provide_buffers_bool")]
mod s5_provide_buffers_bool {
    use crate::kapi::rpc::{FreedRqst, Lent, Rqst, RqstStorage, SendLocked, Task, Transport, Xprt};
    use kernel::prelude::*;

    struct T;

    #[vtable]
    impl Transport for T {
        fn alloc_slot(&self, _x: Xprt<'_>, _t: &Task<'_>) {}
        fn free_slot(&self, _x: Xprt<'_>, _r: FreedRqst<'_>) {}
        fn storage<'a>(&'a self, _r: &Rqst<'_>) -> Option<&'a RqstStorage> {
            None
        }
        fn provide_buffers(&self, _t: &Task<'_>, _r: &Rqst<'_>) -> bool {
            true
        }
        fn release_request<'a>(&'a self, _x: Xprt<'_>, _r: &Rqst<'_>) -> Option<&'a RqstStorage> {
            None
        }
        fn connect(_t: Lent<'_, Self>, _x: Xprt<'_>, _task: &Task<'_>) {}
        fn close(&self, _x: Xprt<'_>, _l: &mut SendLocked<'_>) {}
        fn send_request(_t: Lent<'_, Self>, _x: Xprt<'_>, _r: &Rqst<'_>, _l: &mut SendLocked<'_>) -> Result {
            Ok(())
        }
        fn shutdown(&self, _x: Xprt<'_>, _l: &mut SendLocked<'_>) {}
    }
}

// S5: a class whose registration slot is a function, free to answer
// differently each time.
// misuse: s5_class_slot_fn E0407
#[cfg(misuse = "s5_class_slot_fn")]
mod s5_class_slot_fn {
    use crate::kapi::rpc::{ClassSlot, ClassSlotRef, CreateArgs, NewXprt, TransportClass, MAX_NETIDS};
    use kernel::{c_str, prelude::*, str::CStr};

    static SLOT: ClassSlot = ClassSlot::new();
    struct C;

    impl TransportClass for C {
        const NAME: &'static CStr = c_str!("x");
        const IDENT: u32 = 0;
        const NETIDS: [&'static CStr; MAX_NETIDS] = [c_str!("x"), c_str!("y")];
        fn setup(_a: &CreateArgs<'_>) -> Result<NewXprt> {
            Err(EINVAL)
        }
        const SLOT: ClassSlotRef = ClassSlotRef::new(&SLOT);
        fn slot() -> &'static ClassSlot {
            &SLOT
        }
    }
}

// S5: a class slot that is no `static`: a constant's temporary would be a
// fresh slot at every use.
// misuse: s5_class_slot_temporary E0716
#[cfg(misuse = "s5_class_slot_temporary")]
mod s5_class_slot_temporary {
    use crate::kapi::rpc::{ClassSlot, ClassSlotRef, CreateArgs, NewXprt, TransportClass, MAX_NETIDS};
    use kernel::{c_str, prelude::*, str::CStr};

    struct C;

    impl TransportClass for C {
        const NAME: &'static CStr = c_str!("x");
        const IDENT: u32 = 0;
        const NETIDS: [&'static CStr; MAX_NETIDS] = [c_str!("x"), c_str!("y")];
        const SLOT: ClassSlotRef = ClassSlotRef::new(&ClassSlot::new());
        fn setup(_a: &CreateArgs<'_>) -> Result<NewXprt> {
            Err(EINVAL)
        }
    }
}

// S6: a reference to the whole `rpc_xprt`, which SUNRPC changes under
// locks of its own.
// misuse: s6_whole_xprt E0599 no method named `get`
#[cfg(misuse = "s6_whole_xprt")]
fn s6_whole_xprt(x: Xprt<'_>) -> u32 {
    x.get().connect_cookie
}

// S6: a transport kept past the reference that counts it (SUNRPC would
// free it under the copy).
// misuse: s6_xprt_escapes E0515
#[cfg(misuse = "s6_xprt_escapes")]
fn s6_xprt_escapes(r: XprtRef) -> Xprt<'static> {
    r.get()
}

// S6: a connect count written without the send lock.
// misuse: s6_unlocked_write E0061 SendLocked<'_>` is missing
#[cfg(misuse = "s6_unlocked_write")]
fn s6_unlocked_write(x: Xprt<'_>) {
    x.count_connect();
}

// S7: a lease shared between threads over a value that is not `Sync`.
// misuse: s7_lease_sync E0277 `Cell<u8>` cannot be shared between threads safely
#[cfg(misuse = "s7_lease_sync")]
fn s7_lease_sync() {
    fn shared<T: Sync>() {}
    shared::<Lease<'static, core::cell::Cell<u8>>>();
}

// S9: a device's name kept as a reference, which a rename frees.
// misuse: s9_name_reference E0308 found `DeviceName`
#[cfg(misuse = "s9_name_reference")]
fn s9_name_reference<T: ConnHandler>(conn: &Connection<T>) -> &kernel::str::CStr {
    conn.device_name()
}
