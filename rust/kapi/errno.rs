// SPDX-License-Identifier: GPL-2.0

//! Error codes the transport returns that the `kernel` crate does not name.

use kernel::error::Error;

use crate::sys;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`-", stringify!($name), "`.")]
            #[allow(dead_code)]
            pub(crate) fn $name() -> Error {
                Error::from_errno(-(sys::$name as i32))
            }
        )*
    };
}

#[allow(non_snake_case)]
mod codes {
    use super::*;
    errnos!(
        EPROTONOSUPPORT, ECONNREFUSED, ECONNRESET, ECONNABORTED, ENETUNREACH, EHOSTUNREACH,
        ENOTCONN, ETIMEDOUT, ENOBUFS, EBADMSG, EPROTO, EREMOTEIO, ESHUTDOWN, EADDRNOTAVAIL, EAFNOSUPPORT, EBADSLT, EDEADLK,
        EMSGSIZE,
    );
}
pub(crate) use codes::*;
