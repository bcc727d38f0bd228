// SPDX-License-Identifier: GPL-2.0
//! The peer's check of the client's credit accounting (RFC 8166 section
//! 3.3, RFC 8167 section 4.1).
//!
//! A requester may have no more forward messages outstanding than the
//! responder granted in the `rdma_credit` field of its replies; until the
//! first reply of a connection, one. The peer counts, per connection, the
//! client's messages that occupy one of its Receives:
//!
//! * a forward call, from its arrival until the peer has sent its answer
//!   (a message with the call's XID that is not a call of its own);
//! * a forward message that gets no answer (a client RDMA2_OPTIONAL, such
//!   as ROPT_INITXCH), from its arrival until the peer next answers a call.
//!
//! Backward-direction replies (answers to what the peer sent, told by their
//! direction or by the XID of a message of the peer's) and RDMA_ERROR
//! messages from the client do not count, nor do messages the peer cannot
//! decode and never answers.
//!
//! The bound is 1 until the peer has sent its first reply on the
//! connection, afterwards the largest grant it has sent so far (0 counts
//! as 1, as every client sanitises it). Only a reply proper grants: an
//! RDMA_MSG or RDMA_NOMSG answer to a pending call, in either version.
//! What else carries a credit field (RDMA_ERROR, the retired RDMA_DONE and
//! RDMA_MSGP, a reply to no pending call, a backward call, an OPTIONAL
//! message) grants nothing. The largest grant, not the last, because calls
//! sent before the client saw a smaller grant are legal.
//!
//! The peer sees an arrival when it polls the completion, some time after
//! the client sent the message, and counts a reply as gone when it posts
//! the Send, before the client can see it: both err on the side of a lower
//! count, so a correct client never trips the check.
//!
//! Pure counting, tested without RDMA: `verbs::Conn` feeds it every message
//! it receives and sends.

use std::fmt;

use rpcrdma_proto::{v1, v2};

/// `msg_type` of an RPC call.
const CALL: u32 = 0;

/// What a message from the client is, for the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A forward call with this XID (in any version, or in a version the
    /// peer answers with ERR_VERS): counts until answered.
    Call(u32),
    /// An RDMA2_OPTIONAL in the forward direction with this XID: no reply
    /// comes, so it counts until the peer next answers a call (unless it
    /// answers an OPTIONAL of the peer's with the same XID).
    Optional(u32),
    /// Not counted: a backward reply, RDMA_ERROR, or a message the peer
    /// cannot decode and never answers.
    Other,
}

/// What a message the peer sends is, for the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outbound {
    /// RDMA_MSG or RDMA_NOMSG carrying a reply: answers the call `xid`, and
    /// grants `credits` if that call is pending.
    Reply { xid: u32, credits: u32 },
    /// Any other message that can answer the call `xid`: RDMA_ERROR, the
    /// retired procedures, a header the client cannot decode. Grants
    /// nothing.
    Answer { xid: u32 },
    /// A message of the peer's own (a backward call, an OPTIONAL): answers
    /// no call, grants nothing; the client's answer to it does not count.
    Request { xid: u32 },
    /// Too short to carry an XID.
    Nothing,
}

fn word(b: &[u8], i: usize) -> Option<u32> {
    let w = b.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Classifies a message from the client. `speaks_v2`: the peer decodes
/// Version Two (with `--v2`); otherwise it answers every version but One
/// with ERR_VERS, so such a message is a call that gets an answer.
pub fn inbound(msg: &[u8], speaks_v2: bool) -> Inbound {
    let Ok(p) = v1::peek(msg) else { return Inbound::Other };
    match p.vers {
        v1::VERSION => match v1::Header::decode_split(msg, &v1::Limits::DEFAULT) {
            Ok((h, payload)) => match h.body {
                // A Long Call: the RPC message is in the Read chunk.
                v1::Body::NoMsg(_) => Inbound::Call(h.xid),
                v1::Body::Msg(_) if word(payload, 1) == Some(CALL) => Inbound::Call(h.xid),
                _ => Inbound::Other,
            },
            Err(_) => Inbound::Other,
        },
        v2::RPCRDMA_VERSION_2 if speaks_v2 => match v2::Header::decode(msg) {
            Ok((h, _)) => match h.body {
                v2::Body::Msg(c) | v2::Body::NoMsg(c) if c.direction == v2::Direction::Call => Inbound::Call(h.xid),
                v2::Body::Optional(o) if o.direction == v2::Direction::Call => Inbound::Optional(h.xid),
                _ => Inbound::Other,
            },
            Err(_) => Inbound::Other,
        },
        _ => Inbound::Call(p.xid),
    }
}

/// Classifies a message the peer sends.
pub fn outbound(msg: &[u8]) -> Outbound {
    let Some(xid) = word(msg, 0) else { return Outbound::Nothing };
    let Ok(p) = v1::peek(msg) else { return Outbound::Answer { xid } };
    match p.vers {
        v1::VERSION => match v1::Header::decode_split(msg, &v1::Limits::DEFAULT) {
            Ok((h, payload)) => match h.body {
                v1::Body::Msg(_) if word(payload, 1) == Some(CALL) => Outbound::Request { xid },
                v1::Body::Msg(_) | v1::Body::NoMsg(_) => Outbound::Reply { xid, credits: h.credits },
                _ => Outbound::Answer { xid },
            },
            Err(_) => Outbound::Answer { xid },
        },
        v2::RPCRDMA_VERSION_2 => match v2::Header::decode(msg) {
            Ok((h, _)) => match h.body {
                v2::Body::Msg(c) | v2::Body::NoMsg(c) if c.direction == v2::Direction::Reply => {
                    Outbound::Reply { xid, credits: h.credit }
                }
                v2::Body::Error(_) => Outbound::Answer { xid },
                _ => Outbound::Request { xid },
            },
            Err(_) => Outbound::Answer { xid },
        },
        _ => Outbound::Answer { xid },
    }
}

/// The count after a counted arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Messages outstanding, the new one included.
    pub outstanding: u32,
    /// The bound they are held to.
    pub grant: u32,
    /// More outstanding than ever before on this connection.
    pub new_peak: bool,
}

impl Arrival {
    /// The client has more outstanding than it was granted.
    pub fn overrun(&self) -> bool {
        self.outstanding > self.grant
    }
}

impl fmt::Display for Arrival {
    /// The log line of an overrun (the selftests grep for it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "credit overrun: {} outstanding, grant {}", self.outstanding, self.grant)
    }
}

/// XIDs of the peer's own requests remembered, to tell the client's
/// answers to them.
const ASKED: usize = 64;

/// The count of one connection.
#[derive(Debug, Default)]
pub struct Account {
    /// XIDs of the calls not answered yet (a retransmission on the same
    /// connection takes a Receive of its own, so an XID may be here twice).
    pending: Vec<u32>,
    /// Forward OPTIONAL messages since the peer last answered a call.
    optionals: u32,
    /// The largest grant sent; `None` before the first reply.
    grant: Option<u32>,
    /// Most messages outstanding so far.
    peak: u32,
    /// XIDs of the peer's latest requests.
    asked: Vec<u32>,
}

impl Account {
    /// Messages outstanding.
    pub fn outstanding(&self) -> u32 {
        u32::try_from(self.pending.len()).unwrap_or(u32::MAX).saturating_add(self.optionals)
    }

    /// The most the client may have outstanding.
    pub fn bound(&self) -> u32 {
        self.grant.map_or(1, |g| g.max(1))
    }

    /// The call `xid` is waiting for an answer.
    pub fn is_pending(&self, xid: u32) -> bool {
        self.pending.contains(&xid)
    }

    /// A message from the client arrived; `None` if it does not count.
    pub fn arrive(&mut self, m: Inbound) -> Option<Arrival> {
        match m {
            Inbound::Call(xid) => self.pending.push(xid),
            Inbound::Optional(xid) => {
                if let Some(i) = self.asked.iter().position(|&x| x == xid) {
                    // An answer to an OPTIONAL of ours (ROPT_RESPXCH).
                    self.asked.remove(i);
                    return None;
                }
                self.optionals = self.optionals.saturating_add(1);
            }
            Inbound::Other => return None,
        }
        let outstanding = self.outstanding();
        let new_peak = outstanding > self.peak;
        self.peak = self.peak.max(outstanding);
        Some(Arrival { outstanding, grant: self.bound(), new_peak })
    }

    /// The peer sends a message.
    pub fn send(&mut self, m: Outbound) {
        match m {
            Outbound::Reply { xid, credits } => {
                if self.answer(xid) {
                    self.grant = Some(self.grant.map_or(credits, |g| g.max(credits)));
                }
            }
            Outbound::Answer { xid } => {
                self.answer(xid);
            }
            Outbound::Request { xid } => {
                if self.asked.len() == ASKED {
                    self.asked.remove(0);
                }
                self.asked.push(xid);
            }
            Outbound::Nothing => {}
        }
    }

    /// The peer drops the call `xid` on purpose and will never answer it.
    pub fn forget(&mut self, xid: u32) {
        if let Some(i) = self.pending.iter().position(|&x| x == xid) {
            self.pending.remove(i);
        }
    }

    /// Answers one pending call `xid`, if there is one; every OPTIONAL
    /// counted so far is then done with too.
    fn answer(&mut self, xid: u32) -> bool {
        let Some(i) = self.pending.iter().position(|&x| x == xid) else { return false };
        self.pending.remove(i);
        self.optionals = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_be_bytes()).collect()
    }

    /// Arrival of the call `xid`; the line it logs, if any.
    fn call(a: &mut Account, xid: u32) -> Option<String> {
        a.arrive(Inbound::Call(xid)).filter(Arrival::overrun).map(|x| x.to_string())
    }

    fn reply(a: &mut Account, xid: u32, credits: u32) {
        a.send(Outbound::Reply { xid, credits });
    }

    #[test]
    fn one_credit_until_the_first_reply() {
        let mut a = Account::default();
        assert_eq!(a.bound(), 1);
        assert_eq!(call(&mut a, 1), None);
        assert_eq!(call(&mut a, 2).as_deref(), Some("credit overrun: 2 outstanding, grant 1"));
        // The check goes on: the peer keeps serving.
        reply(&mut a, 1, 2);
        assert_eq!(a.outstanding(), 1);
        assert_eq!(a.bound(), 2);
        assert_eq!(call(&mut a, 3), None);
        assert_eq!(call(&mut a, 4).as_deref(), Some("credit overrun: 3 outstanding, grant 2"));
    }

    #[test]
    fn arrivals_and_replies() {
        let mut a = Account::default();
        assert_eq!(call(&mut a, 10), None);
        reply(&mut a, 10, 3);
        for x in 11..14 {
            assert_eq!(call(&mut a, x), None);
        }
        assert_eq!(a.outstanding(), 3);
        assert!(a.is_pending(12));
        reply(&mut a, 12, 3);
        assert!(!a.is_pending(12));
        assert_eq!(call(&mut a, 14), None);
        assert_eq!(call(&mut a, 15).as_deref(), Some("credit overrun: 4 outstanding, grant 3"));
        // Replies in any order; a second reply to the same call answers
        // nothing and grants nothing.
        for x in [15, 11, 14, 13] {
            reply(&mut a, x, 3);
        }
        assert_eq!(a.outstanding(), 0);
        reply(&mut a, 13, 100);
        assert_eq!(a.bound(), 3);
    }

    #[test]
    fn a_retransmission_on_the_same_connection_takes_another_receive() {
        let mut a = Account::default();
        assert_eq!(call(&mut a, 5), None);
        assert_eq!(call(&mut a, 5).as_deref(), Some("credit overrun: 2 outstanding, grant 1"));
        reply(&mut a, 5, 1);
        assert_eq!(a.outstanding(), 1);
    }

    #[test]
    fn an_optional_without_reply_counts_until_the_next_reply() {
        let mut a = Account::default();
        // The Version Two probe, answered with a grant of 2.
        assert_eq!(call(&mut a, 1), None);
        reply(&mut a, 1, 2);
        // ROPT_INITXCH takes one of the two credits until the next reply.
        let x = a.arrive(Inbound::Optional(0x8000_0001)).unwrap();
        assert!(!x.overrun());
        assert_eq!(call(&mut a, 2), None);
        assert_eq!(call(&mut a, 3).as_deref(), Some("credit overrun: 3 outstanding, grant 2"));
        reply(&mut a, 2, 2);
        assert_eq!(a.outstanding(), 1, "the reply took the OPTIONAL with it");
        assert_eq!(call(&mut a, 4), None);
        // An error answers a call too, and takes the OPTIONALs with it.
        a.arrive(Inbound::Optional(0x8000_0002));
        a.send(Outbound::Answer { xid: 3 });
        assert_eq!(a.outstanding(), 1);
        // A reply to no call does not.
        a.arrive(Inbound::Optional(0x8000_0003));
        reply(&mut a, 0xdead, 2);
        assert_eq!(a.outstanding(), 2);
    }

    #[test]
    fn answers_to_the_peers_own_requests_do_not_count() {
        let mut a = Account::default();
        a.send(Outbound::Request { xid: 0x7200_0002 });
        assert_eq!(a.arrive(Inbound::Optional(0x7200_0002)), None);
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.arrive(Inbound::Other), None);
        // Only once.
        assert!(a.arrive(Inbound::Optional(0x7200_0002)).is_some());
        // Old requests are forgotten, a bounded list.
        for x in 0..200 {
            a.send(Outbound::Request { xid: x });
        }
        assert_eq!(a.asked.len(), ASKED);
    }

    #[test]
    fn grants_can_shrink_the_largest_stays() {
        let mut a = Account::default();
        call(&mut a, 1);
        reply(&mut a, 1, 4);
        for x in 2..6 {
            assert_eq!(call(&mut a, x), None);
        }
        // The client had four out when it learnt of the smaller grant.
        reply(&mut a, 2, 2);
        assert_eq!(a.bound(), 4);
        assert_eq!(call(&mut a, 6), None);
        assert_eq!(call(&mut a, 7).as_deref(), Some("credit overrun: 5 outstanding, grant 4"));
    }

    #[test]
    fn only_replies_to_pending_calls_grant() {
        let mut a = Account::default();
        call(&mut a, 1);
        // RDMA_DONE, an error, a reply to no call, a backward call: all
        // with 2^32-1 in their credit field, none a grant.
        a.send(Outbound::Answer { xid: 1 });
        assert_eq!(a.bound(), 1, "an error answers the probe but grants nothing");
        reply(&mut a, 99, u32::MAX);
        a.send(Outbound::Request { xid: 7 });
        a.send(Outbound::Nothing);
        assert_eq!(a.bound(), 1);
        call(&mut a, 2);
        reply(&mut a, 2, 0);
        assert_eq!(a.bound(), 1, "a grant of 0 is taken as 1");
        call(&mut a, 3);
        reply(&mut a, 3, 8);
        assert_eq!(a.bound(), 8);
    }

    #[test]
    fn forgotten_calls_and_peaks() {
        let mut a = Account::default();
        assert!(a.arrive(Inbound::Call(1)).unwrap().new_peak);
        a.forget(1);
        a.forget(1);
        assert_eq!(a.outstanding(), 0);
        let x = a.arrive(Inbound::Call(2)).unwrap();
        assert_eq!((x.outstanding, x.new_peak), (1, false));
        assert!(a.arrive(Inbound::Call(3)).unwrap().new_peak);
    }

    #[test]
    fn inbound_messages() {
        // Version One: a call, a Long Call, a backward reply, an error, junk.
        let call = words(&[0x11, 1, 32, 0, 0, 0, 0, 0x11, 0, 2, 100003, 3, 6]);
        assert_eq!(inbound(&call, false), Inbound::Call(0x11));
        let long = words(&[0x12, 1, 32, 1, 1, 0, 0x1234, 512, 0, 0x1000, 0, 0, 0]);
        assert_eq!(inbound(&long, false), Inbound::Call(0x12));
        let back = words(&[0x13, 1, 32, 0, 0, 0, 0, 0x13, 1, 0, 0, 0, 0]);
        assert_eq!(inbound(&back, false), Inbound::Other);
        assert_eq!(inbound(&words(&[0x14, 1, 32, 4, 2]), false), Inbound::Other);
        assert_eq!(inbound(&words(&[0x15, 1, 32]), false), Inbound::Other);
        assert_eq!(inbound(&words(&[0x16, 1, 32, 9, 0, 0, 0]), false), Inbound::Other);
        // Version Two: a call, a backward reply, an OPTIONAL either way, an
        // error; or, to a Version One peer, a call answered with ERR_VERS.
        let v2call = words(&[0x21, 2, 32, 0, 0, 0, 0, 0, 0x21, 0, 2, 100003, 3, 0]);
        assert_eq!(inbound(&v2call, true), Inbound::Call(0x21));
        assert_eq!(inbound(&v2call, false), Inbound::Call(0x21));
        let v2back = words(&[0x22, 2, 32, 0, 1, 0, 0, 0, 0x22, 1, 0]);
        assert_eq!(inbound(&v2back, true), Inbound::Other);
        let initxch = words(&[0x23, 2, 32, 5, 0, 0x1234, 4, 0]);
        assert_eq!(inbound(&initxch, true), Inbound::Optional(0x23));
        let respxch = words(&[0x24, 2, 32, 5, 1, 0x1234, 4, 0]);
        assert_eq!(inbound(&respxch, true), Inbound::Other);
        assert_eq!(inbound(&words(&[0x25, 2, 32, 4, 3]), true), Inbound::Other);
        assert_eq!(inbound(&words(&[0x26, 2, 32, 0, 7]), true), Inbound::Other);
        assert_eq!(inbound(&words(&[0x27, 3, 32, 0]), true), Inbound::Call(0x27));
    }

    #[test]
    fn outbound_messages() {
        let reply = words(&[0x11, 1, 8, 0, 0, 0, 0, 0x11, 1, 0, 0, 0, 0]);
        assert_eq!(outbound(&reply), Outbound::Reply { xid: 0x11, credits: 8 });
        let nomsg = words(&[0x12, 1, 2, 1, 0, 0, 1, 1, 0x1234, 512, 0, 0x1000]);
        assert_eq!(outbound(&nomsg), Outbound::Reply { xid: 0x12, credits: 2 });
        let done = words(&[0x13, 1, u32::MAX, 3]);
        assert_eq!(outbound(&done), Outbound::Answer { xid: 0x13 });
        let err = words(&[0x14, 1, u32::MAX, 4, 2]);
        assert_eq!(outbound(&err), Outbound::Answer { xid: 0x14 });
        let backcall = words(&[0x15, 1, u32::MAX, 0, 0, 0, 0, 0x15, 0, 2, 0x4000_0000, 1, 0]);
        assert_eq!(outbound(&backcall), Outbound::Request { xid: 0x15 });
        assert_eq!(outbound(&reply[..20]), Outbound::Answer { xid: 0x11 });
        assert_eq!(outbound(&reply[..3]), Outbound::Nothing);
        let v2reply = words(&[0x21, 2, 2, 0, 1, 0, 0, 0, 0x21, 1, 0]);
        assert_eq!(outbound(&v2reply), Outbound::Reply { xid: 0x21, credits: 2 });
        let v2err = words(&[0x22, 2, u32::MAX, 4, 2]);
        assert_eq!(outbound(&v2err), Outbound::Answer { xid: 0x22 });
        let v2opt = words(&[0x23, 2, 8, 5, 1, 0x7777, 4, 0]);
        assert_eq!(outbound(&v2opt), Outbound::Request { xid: 0x23 });
        let v2backcall = words(&[0x24, 2, 8, 0, 0, 0, 0, 0, 0x24, 0, 2]);
        assert_eq!(outbound(&v2backcall), Outbound::Request { xid: 0x24 });
        assert_eq!(outbound(&v2reply[..20]), Outbound::Answer { xid: 0x21 });
    }

    #[test]
    fn encoders_agree() {
        // What the peer's own encoders produce is classified as meant.
        let mut m = [0u8; 64];
        let n = v1::encode(&mut m, 7, 2, &v1::Body::Msg(v1::ChunkLists::NONE)).unwrap();
        let mut r = m[..n].to_vec();
        r.extend(words(&[7, 1, 0, 0, 0, 0]));
        assert_eq!(outbound(&r), Outbound::Reply { xid: 7, credits: 2 });
        let n = v2::Header::error(8, u32::MAX, v2::ErrorBody::BadHeader).encode(&mut m).unwrap();
        assert_eq!(outbound(&m[..n]), Outbound::Answer { xid: 8 });
    }
}
