// SPDX-License-Identifier: GPL-2.0

//! Sending, and when a Send asks for a completion.
//!
//! Only every few Sends is signalled: a signalled completion gives back
//! its buffer and every buffer posted before it (the queue pair completes
//! in order). A Send that maps pages is always signalled, so that they are
//! unmapped promptly; the token it returns tells the caller when its pages
//! are free again.

use core::sync::atomic::Ordering;

use kernel::error::Result;

use super::{
    endpoint::{Connection, EpState, Live},
    ConnHandler, OneRegistration, PagesInFlight, PostedRegistration, Registration, SendDone, SendFailed, SendWriter,
};
use crate::{
    kapi::ib::{SendPolicy, Sent},
    proto::credits::SendSignals,
};

impl SendPolicy for SendSignals {
    #[inline]
    fn signal(&mut self, mapped: bool, idle_after: usize) -> bool {
        self.post(mapped, idle_after)
    }
}

impl<T: ConnHandler> EpState<T> {
    /// Counts a posted Send; returns its pages token.
    #[inline]
    fn count(&self, sent: Sent) -> PagesInFlight {
        self.counters.sends.fetch_add(1, Ordering::Relaxed);
        // Most Sends are neither: skip the locked adds of zero.
        if sent.signaled {
            self.counters.sends_signalled.fetch_add(1, Ordering::Relaxed);
        }
        if sent.mapped {
            self.counters.sends_mapped.fetch_add(1, Ordering::Relaxed);
        }
        sent.pages
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Sends one message: `fill` builds it, copying bytes into a pre-mapped
    /// buffer and mapping pages in place ([`SendWriter`]). Fails with
    /// `ENOBUFS` when every Send buffer is in flight (wait for
    /// [`ConnHandler::send_done`]).
    ///
    /// The registrations in `reg` are posted in front of the Send; the
    /// returned token owns them until they are invalidated. On failure
    /// nothing was posted and the registration comes back.
    #[inline]
    pub(crate) fn send(
        &self,
        reg: Registration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, PagesInFlight), SendFailed> {
        let (posted, sent) = self.conn.send(reg, fill)?;
        Ok((posted, self.conn.events().count(sent)))
    }

    /// [`Connection::send`] with the one region of `reg`.
    #[inline]
    pub(crate) fn send_one(
        &self,
        reg: OneRegistration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, PagesInFlight), SendFailed<OneRegistration>> {
        let (posted, sent) = self.conn.send_one(reg, fill)?;
        Ok((posted, self.conn.events().count(sent)))
    }

    /// Sends a message that advertises no memory regions; see
    /// [`Connection::send`].
    pub(crate) fn send_unregistered(&self, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<PagesInFlight> {
        let sent = self.conn.send_unregistered(fill)?;
        Ok(self.conn.events().count(sent))
    }

    /// Sends a message with Send With Invalidate of the peer's `rkey`
    /// (a responder's answer); see [`Connection::send`].
    pub(crate) fn send_invalidating(
        &self,
        rkey: u32,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> Result<PagesInFlight> {
        let sent = self.conn.send_invalidating(rkey, fill)?;
        Ok(self.conn.events().count(sent))
    }

    /// Waits until the Send of `sent` no longer reads its pages; see
    /// [`Live::wait_sent`]. Sleeps.
    pub(crate) fn wait_sent(&self, sent: PagesInFlight) -> SendDone {
        self.conn.wait_sent(sent)
    }
}

impl<T: ConnHandler> Live<'_, T> {
    /// Waits until the Send that carried `sent`'s pages completed, so the
    /// caller may give them back. Sleeps.
    pub(crate) fn wait_sent(&self, sent: PagesInFlight) -> SendDone {
        self.0.wait_sent(sent)
    }

    /// Sends one message that advertises no memory regions from a
    /// completion handler; see [`Connection::send`].
    pub(crate) fn send_unregistered(&self, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<PagesInFlight> {
        let sent = self.0.send_unregistered(fill)?;
        Ok(self.0.events().count(sent))
    }
}
