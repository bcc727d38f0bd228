// SPDX-License-Identifier: GPL-2.0
//! RPC-over-RDMA Version Two transport header and version negotiation.
//!
//! Implements the XDR of draft-cel-nfsv4-rpcrdma-version-two (June 2016),
//! section 4.2, and the requester/responder rules of section 5 ("Protocol
//! Version Negotiation"). Section numbers below refer to that draft.
//!
//! Every header starts with the same four words as Version One (the
//! [`v1::Prefix`]: `rdma_xid`, `rdma_vers`, `rdma_credit`, `rdma_proc`), so a
//! receiver can tell the versions apart before decoding anything else
//! ([`v1::peek`], [`ProtocolVersion::of`]).
//!
//! The Read list, Write list and Reply chunk have exactly the XDR of Version
//! One, so they are decoded and encoded by [`super::v1`]: a decoded header
//! carries zero-copy [`v1::Chunks`] views, fully validated (and bounded by
//! [`Limits::chunks`]) before the decoder returns, so iterating them cannot
//! fail; a header to encode may carry caller slices ([`v1::ChunkLists`])
//! instead. `ERR_VERS`, whose layout is the same in both versions, is also
//! read and written with Version One's functions.
//!
//! Choices made where the draft is silent or damaged:
//!
//! * Section 3.2 says a direction field was "added to the rpcrdma2_chunks and
//!   rpcrdma2_error structures", but the normative XDR of section 4.2 has no
//!   direction in `rpcrdma2_error`; section 4.2.2 says an `RDMA2_ERROR` is
//!   always a REPLY. The XDR wins: no direction word is decoded or encoded for
//!   errors, and [`Header::direction`] reports [`Direction::Reply`].
//! * The XDR names the MSG/NOMSG body both `rpcrdma2_chunk_lists` (the struct)
//!   and `rpcrdma2_chunks` (the union arm); they are the same structure,
//!   [`Chunks`].
//! * `rpcrdma2_error` has no default arm, so an error code other than the
//!   three defined is an XDR error ([`V2Error::BadErrorCode`]). A receiver that
//!   wants to fail the RPC anyway can still read the XID with [`v1::peek`].
//! * Section 4.2.1 forbids a payload after `RDMA2_ERROR` (and, as in Version
//!   One, none follows `RDMA2_NOMSG`). The decoder does not reject trailing
//!   bytes: it returns everything after the transport header as the payload
//!   slice and leaves the policy to the caller.
//! * XDR padding bytes of `rdma_optinfo` are not checked for zero (as the
//!   Linux XDR decoders do not check them).

use super::cm;
use super::v1::{self, Prefix, V1Error, FIXED_HEADER_LEN};
use super::xdr::{align4, XdrError, XdrReader, XdrWriter};

/// Protocol version number of RPC-over-RDMA Version Two (section 5).
pub const RPCRDMA_VERSION_2: u32 = 2;
/// Lowest protocol version this implementation speaks ([`v1::VERSION`]).
pub const SUPPORTED_VERSION_LOW: u32 = v1::VERSION;
/// Highest protocol version this implementation speaks.
pub const SUPPORTED_VERSION_HIGH: u32 = RPCRDMA_VERSION_2;

/// `rdma_proc`: an RPC message follows the transport header inline.
pub const RDMA2_MSG: u32 = v1::RDMA_MSG;
/// `rdma_proc`: the RPC message is conveyed entirely by chunks.
pub const RDMA2_NOMSG: u32 = v1::RDMA_NOMSG;
/// `rdma_proc`: a transport error report (values 2 and 3, Version One's
/// RDMA_MSGP and RDMA_DONE, are not defined in Version Two).
pub const RDMA2_ERROR: u32 = v1::RDMA_ERROR;
/// `rdma_proc`: an OPTIONAL (extension) header type, section 3.1.
pub const RDMA2_OPTIONAL: u32 = 5;

/// `rdma_err`: the responder does not support the requester's version.
pub const RDMA2_ERR_VERS: u32 = v1::ERR_VERS;
/// `rdma_err`: the transport header could not be parsed.
pub const RDMA2_ERR_BAD_HEADER: u32 = 2;
/// `rdma_err`: the `rdma_opttype` of an OPTIONAL message is not recognized
/// or not supported (section 3.1).
pub const RDMA2_ERR_INVAL_OPTION: u32 = 3;

/// `msg_type` CALL (RFC 5531, section 9).
pub const MSG_CALL: u32 = 0;
/// `msg_type` REPLY (RFC 5531, section 9).
pub const MSG_REPLY: u32 = 1;

/// Inline threshold a Version Two receiver must support (section 2.3).
pub const V2_DEFAULT_INLINE_THRESHOLD: u32 = 4096;
/// Default inline threshold of Version One.
pub const V1_DEFAULT_INLINE_THRESHOLD: u32 = 1024;
/// Largest message a requester may send while negotiating, because the
/// responder might only support Version One (section 5).
pub const NEGOTIATION_MAX_MESSAGE: u32 = V1_DEFAULT_INLINE_THRESHOLD;
/// Credits a requester may assume until it receives a non-error reply
/// (section 5): one message at a time.
pub const NEGOTIATION_CREDITS: u32 = 1;

/// A failure decoding or encoding a Version Two header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V2Error {
    /// An XDR primitive failed (truncation, bad boolean, overlong opaque,
    /// output buffer too small).
    Xdr(XdrError),
    /// `rdma_vers` is not 2.
    BadVersion(u32),
    /// `rdma_proc` is not one of the Version Two header types.
    BadProc(u32),
    /// A `msg_type` direction was neither CALL nor REPLY.
    BadDirection(u32),
    /// `rdma_err` is not a Version Two error code.
    BadErrorCode(u32),
    /// A chunk list was longer than the [`Limits`] allow.
    LimitExceeded(Limit),
}

impl From<XdrError> for V2Error {
    fn from(e: XdrError) -> Self {
        V2Error::Xdr(e)
    }
}

impl From<V1Error> for V2Error {
    /// Maps a failure of the shared Version One code (chunk lists, prefix,
    /// `ERR_VERS`) to its Version Two equivalent.
    fn from(e: V1Error) -> Self {
        match e {
            V1Error::Xdr(e) => V2Error::Xdr(e),
            V1Error::VersionMismatch(p) => V2Error::BadVersion(p.vers),
            V1Error::BadProc(p) => V2Error::BadProc(p),
            V1Error::BadErrorCode(c) => V2Error::BadErrorCode(c),
            V1Error::TooManyReadSegments { .. } => V2Error::LimitExceeded(Limit::ReadSegments),
            V1Error::TooManyWriteChunks { .. } => V2Error::LimitExceeded(Limit::WriteChunks),
            V1Error::TooManyWriteSegments { .. } => V2Error::LimitExceeded(Limit::WriteSegments),
            V1Error::TooManyChunkSegments { .. } => V2Error::LimitExceeded(Limit::ChunkSegments),
        }
    }
}

impl V2Error {
    /// The `RDMA2_ERROR` body a responder sends back when a received header
    /// fails to decode with this error (section 4.2.3): `ERR_VERS` with this
    /// implementation's range for a wrong version, `ERR_BAD_HEADER` otherwise.
    pub const fn reply(&self) -> ErrorBody {
        match self {
            V2Error::BadVersion(_) => ErrorBody::Vers { low: SUPPORTED_VERSION_LOW, high: SUPPORTED_VERSION_HIGH },
            _ => ErrorBody::BadHeader,
        }
    }
}

/// Which decoding limit was exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Entries in the Read list ([`v1::Limits::max_read_segments`]).
    ReadSegments,
    /// Chunks in the Write list ([`v1::Limits::max_write_chunks`]).
    WriteChunks,
    /// Segments in one Write or Reply chunk ([`v1::Limits::max_chunk_segments`]).
    ChunkSegments,
    /// Segments in the whole Write list ([`v1::Limits::max_write_segments`]).
    WriteSegments,
}

/// Implementation limits applied while decoding untrusted headers.
///
/// Lists are also always bounded by the size of the received buffer; these
/// limits additionally cap the work and resources one header can demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Limits on the chunk lists, enforced by the Version One decoders.
    pub chunks: v1::Limits,
    /// Largest `rdma_optinfo` length accepted (an [`XdrError::TooLong`]
    /// otherwise).
    pub max_optinfo_len: u32,
}

impl Limits {
    /// Generous defaults: 128 Read segments, 16 Write chunks, 128 segments
    /// per chunk (so at most 2048 Write segments in all), 64 KiB of
    /// `rdma_optinfo`.
    pub const DEFAULT: Limits = Limits {
        chunks: v1::Limits {
            max_read_segments: 128,
            max_write_chunks: 16,
            max_chunk_segments: 128,
            max_write_segments: 2048,
        },
        max_optinfo_len: 65536,
    };
    /// No limit beyond the size of the buffer.
    pub const UNLIMITED: Limits = Limits { chunks: v1::Limits::UNBOUNDED, max_optinfo_len: u32::MAX };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Message direction (`enum msg_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// CALL (0): requester to responder.
    Call,
    /// REPLY (1): responder to requester.
    Reply,
}

impl Direction {
    /// Decodes a `msg_type` value.
    pub const fn from_u32(v: u32) -> Result<Self, V2Error> {
        match v {
            MSG_CALL => Ok(Direction::Call),
            MSG_REPLY => Ok(Direction::Reply),
            other => Err(V2Error::BadDirection(other)),
        }
    }

    /// The `msg_type` value.
    pub const fn as_u32(self) -> u32 {
        match self {
            Direction::Call => MSG_CALL,
            Direction::Reply => MSG_REPLY,
        }
    }
}

/// Chunk lists a header can carry and encode: the decoded views of
/// [`v1::Chunks`] or the caller's slices in [`v1::ChunkLists`].
pub trait EncodeLists {
    /// Encoded length of the Read list, Write list and Reply chunk.
    fn lists_len(&self) -> usize;
    /// Encodes the three lists into `w`; writes nothing if it lacks space.
    fn put_lists(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error>;
}

impl EncodeLists for v1::Chunks<'_> {
    fn lists_len(&self) -> usize {
        self.encoded_len()
    }
    fn put_lists(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        self.encode(w)
    }
}

impl EncodeLists for v1::ChunkLists<'_> {
    fn lists_len(&self) -> usize {
        self.encoded_len()
    }
    fn put_lists(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        self.encode(w)
    }
}

/// The body of `RDMA2_MSG` and `RDMA2_NOMSG` (`rpcrdma2_chunk_lists`): a
/// direction, then `rdma_reads`, `rdma_writes` and `rdma_reply`, which are
/// encoded exactly as Version One's chunk lists.
///
/// `C` is [`v1::Chunks`] in a decoded header and [`v1::ChunkLists`] (or
/// [`v1::Chunks`]) in a header to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks<C> {
    /// `rdma_direction`: must equal the `msg_type` of the RPC message.
    pub direction: Direction,
    /// The Read list, Write list and optional Reply chunk.
    pub lists: C,
}

impl<'a> Chunks<v1::Chunks<'a>> {
    /// Chunk lists that are all empty.
    pub const fn empty(direction: Direction) -> Self {
        Chunks { direction, lists: v1::Chunks::EMPTY }
    }

    fn decode(r: &mut XdrReader<'a>, limits: &v1::Limits) -> Result<Self, V2Error> {
        let direction = Direction::from_u32(r.u32()?)?;
        Ok(Chunks { direction, lists: v1::Chunks::decode(r, limits)? })
    }
}

impl<C: EncodeLists> Chunks<C> {
    fn encoded_len(&self) -> usize {
        self.lists.lists_len().saturating_add(4)
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), V2Error> {
        w.put_u32(self.direction.as_u32())?;
        Ok(self.lists.put_lists(w)?)
    }
}
/// The body of `RDMA2_ERROR` (`rpcrdma2_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody {
    /// `RDMA2_ERR_VERS`: the responder supports versions `low..=high` only.
    Vers {
        /// `rdma_vers_low`: lowest version supported.
        low: u32,
        /// `rdma_vers_high`: highest version supported.
        high: u32,
    },
    /// `RDMA2_ERR_BAD_HEADER`: the header could not be parsed.
    BadHeader,
    /// `RDMA2_ERR_INVAL_OPTION`: the OPTIONAL type is not supported.
    InvalOption,
}

impl ErrorBody {
    /// The `rdma_err` code.
    pub const fn code(&self) -> u32 {
        match self {
            ErrorBody::Vers { .. } => RDMA2_ERR_VERS,
            ErrorBody::BadHeader => RDMA2_ERR_BAD_HEADER,
            ErrorBody::InvalOption => RDMA2_ERR_INVAL_OPTION,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            ErrorBody::Vers { .. } => 12,
            _ => 4,
        }
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), V2Error> {
        w.put_u32(self.code())?;
        if let ErrorBody::Vers { low, high } = self {
            w.put_u32(*low)?;
            w.put_u32(*high)?;
        }
        Ok(())
    }

    fn decode(r: &mut XdrReader<'_>) -> Result<Self, V2Error> {
        match r.u32()? {
            RDMA2_ERR_VERS => Ok(ErrorBody::Vers { low: r.u32()?, high: r.u32()? }),
            RDMA2_ERR_BAD_HEADER => Ok(ErrorBody::BadHeader),
            RDMA2_ERR_INVAL_OPTION => Ok(ErrorBody::InvalOption),
            other => Err(V2Error::BadErrorCode(other)),
        }
    }
}

/// The body of `RDMA2_OPTIONAL` (`rpcrdma2_optional`, section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Optional<'a> {
    /// `rdma_optdir`: direction; with no RPC payload a requester sends CALL
    /// and a responder REPLY (section 4.2.2).
    pub direction: Direction,
    /// `rdma_opttype`: which optional operation (defined by extensions).
    pub opttype: u32,
    /// `rdma_optinfo`: the operation's XDR, opaque to the base protocol.
    pub optinfo: &'a [u8],
}

impl<'a> Optional<'a> {
    fn encoded_len(&self) -> usize {
        align4(self.optinfo.len().min(usize::MAX - 3)).saturating_add(12)
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), V2Error> {
        w.put_u32(self.direction.as_u32())?;
        w.put_u32(self.opttype)?;
        Ok(w.put_opaque_var(self.optinfo)?)
    }

    fn decode(r: &mut XdrReader<'a>, limits: &Limits) -> Result<Self, V2Error> {
        let direction = Direction::from_u32(r.u32()?)?;
        let opttype = r.u32()?;
        let optinfo = r.opaque_var(limits.max_optinfo_len)?;
        Ok(Optional { direction, opttype, optinfo })
    }
}

/// The header-type specific part of a Version Two header (`rpcrdma2_body`).
///
/// `C` is the form of the chunk lists, as in [`Chunks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a, C = v1::Chunks<'a>> {
    /// `RDMA2_MSG`: chunk lists; the RPC message follows the header.
    Msg(Chunks<C>),
    /// `RDMA2_NOMSG`: chunk lists; the RPC message is carried by chunks.
    NoMsg(Chunks<C>),
    /// `RDMA2_ERROR`: a transport error report (always a REPLY).
    Error(ErrorBody),
    /// `RDMA2_OPTIONAL`: an extension operation.
    Optional(Optional<'a>),
}

impl<C> Body<'_, C> {
    /// The `rdma_proc` value of this body.
    pub const fn proc_number(&self) -> u32 {
        match self {
            Body::Msg(_) => RDMA2_MSG,
            Body::NoMsg(_) => RDMA2_NOMSG,
            Body::Error(_) => RDMA2_ERROR,
            Body::Optional(_) => RDMA2_OPTIONAL,
        }
    }
}

/// A decoded or to-be-encoded Version Two transport header
/// (`rpcrdma2_xprt_hdr`). `rdma_vers` is implicitly 2.
///
/// A decoded header is a `Header<'a>` (chunk lists as [`v1::Chunks`] views);
/// to encode one from slices, use `Header<'a, v1::ChunkLists<'a>>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a, C = v1::Chunks<'a>> {
    /// `rdma_xid`: the RPC XID (or, for OPTIONAL messages without payload, an
    /// XID from the space of the message's direction).
    pub xid: u32,
    /// `rdma_credit`: credits requested (calls) or granted (replies).
    pub credit: u32,
    /// The body selected by `rdma_proc`.
    pub body: Body<'a, C>,
}

impl<'a> Header<'a> {
    /// An `RDMA2_ERROR` header answering the message with `xid`.
    pub const fn error(xid: u32, credit: u32, error: ErrorBody) -> Header<'static> {
        Header { xid, credit, body: Body::Error(error) }
    }

    /// Decodes a header with [`Limits::DEFAULT`]. Returns the header and the
    /// bytes after it (the RPC Payload Stream, if any).
    pub fn decode(buf: &'a [u8]) -> Result<(Self, &'a [u8]), V2Error> {
        Self::decode_with(buf, &Limits::DEFAULT)
    }

    /// Decodes a header, rejecting lists beyond `limits`. Returns the header
    /// and the bytes after it. Trailing bytes are never an error (see the
    /// module documentation).
    pub fn decode_with(buf: &'a [u8], limits: &Limits) -> Result<(Self, &'a [u8]), V2Error> {
        let mut r = XdrReader::new(buf);
        let p = Prefix::read(&mut r)?;
        if p.vers != RPCRDMA_VERSION_2 {
            return Err(V2Error::BadVersion(p.vers));
        }
        let body = match p.procedure {
            RDMA2_MSG => Body::Msg(Chunks::decode(&mut r, &limits.chunks)?),
            RDMA2_NOMSG => Body::NoMsg(Chunks::decode(&mut r, &limits.chunks)?),
            RDMA2_ERROR => Body::Error(ErrorBody::decode(&mut r)?),
            RDMA2_OPTIONAL => Body::Optional(Optional::decode(&mut r, limits)?),
            other => return Err(V2Error::BadProc(other)),
        };
        Ok((Header { xid: p.xid, credit: p.credits, body }, r.rest()))
    }
}

impl<C: EncodeLists> Header<'_, C> {
    /// Length of the encoded header in bytes (saturating at `usize::MAX`).
    pub fn encoded_len(&self) -> usize {
        let body = match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.encoded_len(),
            Body::Error(e) => e.encoded_len(),
            Body::Optional(o) => o.encoded_len(),
        };
        body.saturating_add(FIXED_HEADER_LEN)
    }

    /// Encodes the header into `out` and returns its length. Nothing is
    /// written if `out` is too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, V2Error> {
        let out = out.get_mut(..self.encoded_len()).ok_or(V2Error::Xdr(XdrError::NoSpace))?;
        let mut w = XdrWriter::new(out);
        let prefix =
            Prefix { xid: self.xid, vers: RPCRDMA_VERSION_2, credits: self.credit, procedure: self.body.proc_number() };
        prefix.write(&mut w)?;
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.encode(&mut w)?,
            Body::Error(e) => e.encode(&mut w)?,
            Body::Optional(o) => o.encode(&mut w)?,
        }
        Ok(w.len())
    }
}

impl<C> Header<'_, C> {
    /// The direction of the message: the chunk lists' or OPTIONAL's
    /// direction field; always REPLY for `RDMA2_ERROR` (section 4.2.2).
    pub const fn direction(&self) -> Direction {
        match &self.body {
            Body::Msg(c) | Body::NoMsg(c) => c.direction,
            Body::Error(_) => Direction::Reply,
            Body::Optional(o) => o.direction,
        }
    }
}

/// The protocol version found in a received header's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolVersion {
    /// `rdma_vers` == 1: decode with [`v1::Header::decode`].
    V1,
    /// `rdma_vers` == 2: decode with [`Header::decode`].
    V2,
    /// Any other value: a responder answers `ERR_VERS` (see
    /// [`encode_version_error`]).
    Unknown(u32),
}

impl ProtocolVersion {
    /// Which protocol version a header claims, from its prefix (read with
    /// [`v1::peek`]).
    pub const fn of(prefix: &Prefix) -> Self {
        match prefix.vers {
            v1::VERSION => ProtocolVersion::V1,
            RPCRDMA_VERSION_2 => ProtocolVersion::V2,
            other => ProtocolVersion::Unknown(other),
        }
    }
}

/// Encodes an `ERR_VERS` error reply with an explicit `rdma_vers` field and
/// returns its length (28 bytes).
///
/// Version One and Two encode `ERR_VERS` identically (proc 4, err 1, low,
/// high), so this one message serves both; it is
/// [`v1::encode_err_vers_any_version`]. A responder answering a header of an
/// unsupported version should pass `vers` = [`v1::VERSION`] with
/// `low`/`high` = [`SUPPORTED_VERSION_LOW`]/[`SUPPORTED_VERSION_HIGH`]: RFC
/// 5666 section 4.3 requires a version "otherwise valid at the receiver", and
/// the Linux client drops any reply whose `rdma_vers` is not 1.
pub fn encode_version_error(xid: u32, vers: u32, credit: u32, low: u32, high: u32, out: &mut [u8]) -> Result<usize, V2Error> {
    Ok(v1::encode_err_vers_any_version(out, xid, vers, credit, low, high)?)
}

/// A protocol version this implementation can run on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// RPC-over-RDMA Version One.
    V1,
    /// RPC-over-RDMA Version Two.
    V2,
}

impl Version {
    /// The `rdma_vers` value.
    pub const fn number(self) -> u32 {
        match self {
            Version::V1 => v1::VERSION,
            Version::V2 => RPCRDMA_VERSION_2,
        }
    }

    /// The default inline threshold once this version is in use (section 5.1,
    /// 5.2: both directions switch to the version's default).
    pub const fn default_inline_threshold(self) -> u32 {
        match self {
            Version::V1 => V1_DEFAULT_INLINE_THRESHOLD,
            Version::V2 => V2_DEFAULT_INLINE_THRESHOLD,
        }
    }

    /// Bytes a transport header of this version has beyond the Version One
    /// header with the same chunk lists: the direction word of Version Two's
    /// `rpcrdma2_chunks` (section 4.2).
    pub const fn extra_header_len(self) -> u32 {
        match self {
            Version::V1 => 0,
            Version::V2 => 4,
        }
    }
}

/// What a Version Two requester does with a message received while its first
/// (probe) call is outstanding. See [`probe_reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A valid non-error Version Two reply with the probe's XID (section
    /// 5.1): use Version Two and its 4096-byte inline thresholds; `credit` is
    /// the responder's actual credit grant.
    UseV2 {
        /// `rdma_credit` of the reply.
        credit: u32,
    },
    /// A Version Two `RDMA2_ERROR` other than `ERR_VERS` with the probe's
    /// XID: the responder parsed the header as Version Two, so Version Two is
    /// in use, but the call failed and no credit grant was received (keep
    /// [`NEGOTIATION_CREDITS`] until a non-error reply arrives).
    RejectedV2(ErrorBody),
    /// `ERR_VERS` with the probe's XID whose range allows Version One
    /// (section 5.2): retransmit the call as Version One and use Version One
    /// (1024-byte thresholds) for the rest of the connection. Remember the
    /// responder as Version One-only for reconnects.
    FallBackToV1 {
        /// `rdma_vers_low` reported.
        low: u32,
        /// `rdma_vers_high` reported.
        high: u32,
    },
    /// `ERR_VERS` whose range contains no version usable here: fail the
    /// call and disconnect.
    NoCommonVersion {
        /// `rdma_vers_low` reported.
        low: u32,
        /// `rdma_vers_high` reported.
        high: u32,
    },
    /// Not the answer to the probe (other XID, a CALL, or negotiation not in
    /// progress): handle it by the normal rules, negotiation is unaffected.
    NotForProbe,
    /// A well-formed Version Two `RDMA2_OPTIONAL` message with its own XID,
    /// received before the probe's answer: a responder that speaks
    /// Version Two may send its characteristics (xcharext ROPT_INITXCH)
    /// as its first message on the connection, ahead of that answer. Read
    /// it as Version Two; only the probe's answer settles the version.
    OptionalBeforeAnswer,
    /// A non-error reply in a version other than the one the probe used
    /// (the responder must reply in the requester's version, section 5.3):
    /// a protocol violation; disconnect.
    UnexpectedVersion(u32),
    /// The probe's reply could not be decoded: a protocol error; disconnect.
    Malformed(V2Error),
}

/// Classifies `reply`, received while the Version Two probe call with XID
/// `probe_xid` is outstanding (section 5). Pure; never panics.
///
/// Choices (section 5.2 leaves them open):
/// * `ERR_VERS` is recognized whatever its `rdma_vers` field says (RFC 5666
///   lets the responder put any version it supports there, and Linux echoes
///   the requester's 2), because its layout is the same in both versions.
/// * The requester picks the highest version it supports inside
///   `low..=high`, excluding Version Two which was just refused (retrying it
///   could loop); an empty or inverted range means no common version.
pub fn probe_reply(probe_xid: u32, reply: &[u8]) -> Decision {
    let prefix = match v1::peek(reply) {
        Ok(p) => p,
        Err(e) => return Decision::Malformed(e.into()),
    };
    if prefix.xid != probe_xid {
        let optional = prefix.vers == RPCRDMA_VERSION_2
            && matches!(Header::decode(reply), Ok((Header { body: Body::Optional(_), .. }, _)));
        return if optional { Decision::OptionalBeforeAnswer } else { Decision::NotForProbe };
    }
    match v1::decode_error_any_version(reply) {
        Ok((_, v1::ErrorBody::Vers { low, high })) => {
            return if low <= v1::VERSION && v1::VERSION <= high {
                Decision::FallBackToV1 { low, high }
            } else {
                Decision::NoCommonVersion { low, high }
            };
        }
        // RDMA_ERROR with its code word present fails to decode only if it
        // is an ERR_VERS cut short.
        Err(V1Error::Xdr(e)) if reply.len() >= ERR_CODE_END => return Decision::Malformed(V2Error::Xdr(e)),
        // Not an error, another error code, or no code: decoded below.
        _ => {}
    }
    if prefix.vers != RPCRDMA_VERSION_2 {
        return Decision::UnexpectedVersion(prefix.vers);
    }
    match Header::decode(reply) {
        Err(e) => Decision::Malformed(e),
        Ok((h, _)) => match h.body {
            Body::Error(e) => Decision::RejectedV2(e),
            _ if h.direction() == Direction::Call => Decision::NotForProbe,
            _ => Decision::UseV2 { credit: h.credit },
        },
    }
}

/// End of the `rdma_err` word of an error header.
const ERR_CODE_END: usize = FIXED_HEADER_LEN + 4;

/// Version negotiation state of a Version Two requester on one connection
/// (section 5), a thin state machine around [`probe_reply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiation {
    /// The probe call (a Version Two message of at most
    /// [`NEGOTIATION_MAX_MESSAGE`] bytes) with this XID is outstanding; no
    /// other call may be sent ([`NEGOTIATION_CREDITS`]).
    Probing {
        /// XID of the probe call.
        xid: u32,
    },
    /// The version in use for the rest of the connection.
    Settled(Version),
    /// The responder supports no version this implementation speaks.
    Failed,
}

impl Negotiation {
    /// Starts negotiating: the caller sends its first call, as Version Two,
    /// with XID `xid`.
    pub const fn start(xid: u32) -> Self {
        Negotiation::Probing { xid }
    }

    /// Skips negotiation, e.g. for a responder known from an earlier
    /// connection to support only Version One.
    pub const fn settled(v: Version) -> Self {
        Negotiation::Settled(v)
    }

    /// Handles a received message and advances the state.
    pub fn on_reply(&mut self, reply: &[u8]) -> Decision {
        let Negotiation::Probing { xid } = *self else {
            return Decision::NotForProbe;
        };
        let d = probe_reply(xid, reply);
        match d {
            Decision::UseV2 { .. } | Decision::RejectedV2(_) => *self = Negotiation::Settled(Version::V2),
            Decision::FallBackToV1 { .. } => *self = Negotiation::Settled(Version::V1),
            Decision::NoCommonVersion { .. } | Decision::UnexpectedVersion(_) | Decision::Malformed(_) => {
                *self = Negotiation::Failed
            }
            Decision::NotForProbe | Decision::OptionalBeforeAnswer => {}
        }
        d
    }

    /// The version settled on, if negotiation is complete.
    pub const fn version(&self) -> Option<Version> {
        match self {
            Negotiation::Settled(v) => Some(*v),
            _ => None,
        }
    }

    /// The inline threshold to use now in both directions: the Version One
    /// default while probing (section 5), then the settled version's default.
    pub const fn inline_threshold(&self) -> u32 {
        match self {
            Negotiation::Settled(v) => v.default_inline_threshold(),
            _ => V1_DEFAULT_INLINE_THRESHOLD,
        }
    }

    /// The version to start the next connection to the same responder with
    /// after this one is lost (section 5.2): Version One if the probe got no
    /// answer (lost or dropped) or Version One was settled on, Version Two if
    /// it was settled on, `None` if there is no common version.
    pub const fn next_connection_version(&self) -> Option<Version> {
        match self {
            Negotiation::Probing { .. } => Some(Version::V1),
            Negotiation::Settled(v) => Some(*v),
            Negotiation::Failed => None,
        }
    }
}

/// The Receive buffer a Version Two requester needs: the responder may
/// send [`V2_DEFAULT_INLINE_THRESHOLD`] bytes inline as soon as it answers
/// the probe.
pub const V2_MIN_RECV_BUFFER: u32 = V2_DEFAULT_INLINE_THRESHOLD;

/// The version state of one requester connection: before its first call,
/// then the [`Negotiation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnVersion {
    /// The next call is the Version Two probe.
    Unprobed,
    /// Probing, or settled.
    Neg(Negotiation),
}

impl ConnVersion {
    /// How a new connection starts. `v1`/`v2`: the versions allowed;
    /// `known_v1_only`: the responder refused or lost a probe before;
    /// `recv_buffer`: our Receive buffer size. Probes unless Version Two is
    /// not allowed, our buffers are too small for it, or the responder is
    /// known not to speak it and Version One is allowed.
    pub const fn start(v1: bool, v2: bool, known_v1_only: bool, recv_buffer: u32) -> ConnVersion {
        let v2_possible = v2 && recv_buffer >= V2_MIN_RECV_BUFFER;
        if v2_possible && !(v1 && known_v1_only) {
            ConnVersion::Unprobed
        } else if v1 || !v2 {
            ConnVersion::Neg(Negotiation::settled(Version::V1))
        } else {
            // Version Two only, and our buffers cannot take it.
            ConnVersion::Neg(Negotiation::Failed)
        }
    }

    /// The version to encode the call with XID `xid` in; `None` if there
    /// is no version in common. The first call of a connection becomes the
    /// probe: while it is out, calls must fit [`NEGOTIATION_MAX_MESSAGE`].
    pub fn for_call(&mut self, xid: u32) -> Option<Version> {
        match *self {
            ConnVersion::Unprobed => {
                *self = ConnVersion::Neg(Negotiation::start(xid));
                Some(Version::V2)
            }
            // One credit while probing: nothing else should be sent, but
            // if it is, it goes as the probe did.
            ConnVersion::Neg(Negotiation::Probing { .. }) => Some(Version::V2),
            ConnVersion::Neg(n) => n.version(),
        }
    }

    /// True while the probe is outstanding.
    pub const fn probing(&self) -> bool {
        matches!(self, ConnVersion::Neg(Negotiation::Probing { .. }))
    }

    /// The connection's inline thresholds (calls, replies) in this state.
    /// `cm`: what the CM private data exchange gave (Version One's);
    /// `peer_rbsiz`: the responder's Receive buffer size as its Version
    /// Two characteristics say (4096 until they say otherwise);
    /// `send_buf`, `recv_buf`: our own buffers' sizes; `peer_has_ours`:
    /// the responder speaks xcharext (its own characteristics arrived), so
    /// it has taken ours, which we send before any call after the probe.
    ///
    /// Until the version is settled (the probe not yet sent, or out),
    /// every message fits [`NEGOTIATION_MAX_MESSAGE`] (section 5: a
    /// responder of either version must be able to take the probe, and
    /// the calls beside it). Version Two: calls as large as the responder
    /// can receive and our Send buffers hold; replies the version's
    /// default, which the responder assumes of us (xcharext section 4.1),
    /// or our whole Receive buffer once the responder has our Receive
    /// Buffer Size.
    pub fn inline_thresholds(&self, cm: cm::Negotiated, peer_rbsiz: u32, send_buf: u32, recv_buf: u32, peer_has_ours: bool) -> (u32, u32) {
        match self {
            ConnVersion::Neg(Negotiation::Settled(Version::V1)) => (cm.send_threshold, cm.recv_threshold),
            ConnVersion::Neg(Negotiation::Settled(Version::V2)) => {
                let replies = if peer_has_ours { recv_buf } else { Version::V2.default_inline_threshold().min(recv_buf) };
                (peer_rbsiz.min(send_buf), replies)
            }
            _ => (NEGOTIATION_MAX_MESSAGE.min(cm.send_threshold), NEGOTIATION_MAX_MESSAGE.min(cm.recv_threshold)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_encodes, mutated, Rng};
    use super::v1::{peek, ChunkLists, ReadSegment, Segment};
    use super::*;

    /// Decoded chunk lists equal the slices they were built from.
    fn lists_eq(d: &v1::Chunks<'_>, n: &ChunkLists<'_>) -> bool {
        d.reads.iter().eq(n.reads.iter().copied())
            && d.writes.len() == n.writes.len()
            && d.writes.iter().zip(n.writes).all(|(a, b)| a.iter().eq(b.iter().copied()))
            && match (d.reply, n.reply) {
                (Some(a), Some(b)) => a.iter().eq(b.iter().copied()),
                (a, b) => a.is_none() && b.is_none(),
            }
    }

    /// A decoded header equals the header it was encoded from.
    fn same(d: &Header<'_>, n: &Header<'_, ChunkLists<'_>>) -> bool {
        (d.xid, d.credit) == (n.xid, n.credit)
            && match (&d.body, &n.body) {
                (Body::Msg(a), Body::Msg(b)) | (Body::NoMsg(a), Body::NoMsg(b)) => {
                    a.direction == b.direction && lists_eq(&a.lists, &b.lists)
                }
                (Body::Error(a), Body::Error(b)) => a == b,
                (Body::Optional(a), Body::Optional(b)) => a == b,
                _ => false,
            }
    }

    /// RDMA2_MSG, CALL, one Read segment, one Write chunk of two segments, a
    /// Reply chunk of one segment, then a 4-byte payload.
    const MSG_CALL: [u8; 120] = [
        0x11, 0x22, 0x33, 0x44, // xid
        0, 0, 0, 2, // vers
        0, 0, 0, 0x20, // credit 32
        0, 0, 0, 0, // RDMA2_MSG
        0, 0, 0, 0, // CALL
        0, 0, 0, 1, // read list: present
        0, 0, 0, 0x80, // position 128
        0xaa, 0xbb, 0xcc, 0xdd, // handle
        0, 0, 0x10, 0, // length 4096
        1, 2, 3, 4, 5, 6, 7, 8, // offset
        0, 0, 0, 0, // end of read list
        0, 0, 0, 1, // write list: present
        0, 0, 0, 2, // two segments
        0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, // h=1 l=512 o=0x10
        0, 0, 0, 2, 0, 0, 3, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, // h=2 l=768 o=0xffffffff00000000
        0, 0, 0, 0, // end of write list
        0, 0, 0, 1, // reply chunk present
        0, 0, 0, 1, // one segment
        0, 0, 0, 3, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, // h=3 l=1024 o=0x20
        b'R', b'P', b'C', b'!', // payload
    ];
    const MSG_CALL_HDR_LEN: usize = 116;

    /// RDMA2_NOMSG, REPLY, empty lists.
    const NOMSG_REPLY: [u8; 32] = [
        0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 2, 0, 0, 0, 0x80, 0, 0, 0, 1, // prefix
        0, 0, 0, 1, // REPLY
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // no reads, writes, reply
    ];

    const ERR_VERS: [u8; 28] = [0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1];
    const ERR_BAD_HEADER: [u8; 20] = [0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 2];
    const ERR_INVAL_OPTION: [u8; 20] = [0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 3];

    /// RDMA2_OPTIONAL, REPLY, opttype 256, 5 bytes of optinfo, 4-byte payload.
    const OPTIONAL: [u8; 40] = [
        0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 5, // prefix
        0, 0, 0, 1, // REPLY
        0, 0, 1, 0, // opttype 256
        0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0, // optinfo
        b'P', b'A', b'Y', b'!',
    ];
    const OPTIONAL_HDR_LEN: usize = 36;

    const VECTORS: [(&[u8], usize); 6] = [
        (&MSG_CALL, MSG_CALL_HDR_LEN),
        (&NOMSG_REPLY, 32),
        (&ERR_VERS, 28),
        (&ERR_BAD_HEADER, 20),
        (&ERR_INVAL_OPTION, 20),
        (&OPTIONAL, OPTIONAL_HDR_LEN),
    ];

    fn encode_eq<C: EncodeLists>(h: &Header<'_, C>, expect: &[u8]) {
        assert_encodes(h.encoded_len(), |out| h.encode(out), expect);
    }

    #[test]
    fn msg_call_vector() {
        let (h, payload) = Header::decode(&MSG_CALL).unwrap();
        assert_eq!(payload, b"RPC!");
        assert_eq!(h.xid, 0x1122_3344);
        assert_eq!(h.credit, 32);
        assert_eq!(h.direction(), Direction::Call);
        let Body::Msg(c) = h.body else { panic!("not MSG: {:?}", h.body) };
        assert_eq!(c.direction, Direction::Call);
        assert_eq!(c.lists.reads.len(), 1);
        let rs = c.lists.reads.iter().next().unwrap();
        assert_eq!(rs, ReadSegment { position: 128, segment: Segment { handle: 0xaabb_ccdd, length: 4096, offset: 0x0102_0304_0506_0708 } });
        assert_eq!(c.lists.writes.len(), 1);
        let wc = c.lists.writes.iter().next().unwrap();
        let mut segs = wc.iter();
        assert_eq!(segs.next(), Some(Segment { handle: 1, length: 512, offset: 0x10 }));
        assert_eq!(segs.next(), Some(Segment { handle: 2, length: 768, offset: 0xffff_ffff_0000_0000 }));
        assert_eq!(segs.next(), None);
        assert_eq!(wc.total_length(), 1280);
        let reply = c.lists.reply.unwrap();
        assert_eq!(reply.iter().collect_array::<1>(), Some([Segment { handle: 3, length: 1024, offset: 0x20 }]));

        // Build the same header from native slices and compare bytes.
        let reads = [rs];
        let wsegs = [Segment { handle: 1, length: 512, offset: 0x10 }, Segment { handle: 2, length: 768, offset: 0xffff_ffff_0000_0000 }];
        let chunks: [&[Segment]; 1] = [&wsegs];
        let rsegs = [Segment { handle: 3, length: 1024, offset: 0x20 }];
        let native = Header {
            xid: 0x1122_3344,
            credit: 32,
            body: Body::Msg(Chunks {
                direction: Direction::Call,
                lists: ChunkLists { reads: &reads, writes: &chunks, reply: Some(&rsegs) },
            }),
        };
        assert!(same(&h, &native), "{h:?} != {native:?}");
        let other = Header { body: Body::Msg(Chunks { direction: Direction::Call, lists: ChunkLists::NONE }), ..native };
        assert!(!same(&h, &other));
        encode_eq(&native, &MSG_CALL[..MSG_CALL_HDR_LEN]);
        encode_eq(&h, &MSG_CALL[..MSG_CALL_HDR_LEN]);
    }

    trait CollectArray: Iterator + Sized {
        fn collect_array<const N: usize>(mut self) -> Option<[Self::Item; N]>
        where
            Self::Item: Copy + Default,
        {
            let mut out = [Self::Item::default(); N];
            for slot in out.iter_mut() {
                *slot = self.next()?;
            }
            if self.next().is_some() {
                return None;
            }
            Some(out)
        }
    }
    impl<I: Iterator> CollectArray for I {}

    #[test]
    fn nomsg_reply_vector() {
        let (h, payload) = Header::decode(&NOMSG_REPLY).unwrap();
        assert!(payload.is_empty());
        assert_eq!(h, Header { xid: 0xdead_beef, credit: 128, body: Body::NoMsg(Chunks::empty(Direction::Reply)) });
        let Body::NoMsg(c) = h.body else { panic!() };
        assert!(c.lists.reads.is_empty() && c.lists.writes.is_empty() && c.lists.reply.is_none());
        encode_eq(&h, &NOMSG_REPLY);
    }

    #[test]
    fn error_vectors() {
        let (h, rest) = Header::decode(&ERR_VERS).unwrap();
        assert!(rest.is_empty());
        assert_eq!(h, Header::error(7, 1, ErrorBody::Vers { low: 1, high: 1 }));
        assert_eq!(h.direction(), Direction::Reply);
        encode_eq(&h, &ERR_VERS);
        let (h, _) = Header::decode(&ERR_BAD_HEADER).unwrap();
        assert_eq!(h, Header::error(7, 1, ErrorBody::BadHeader));
        encode_eq(&h, &ERR_BAD_HEADER);
        let (h, _) = Header::decode(&ERR_INVAL_OPTION).unwrap();
        assert_eq!(h, Header::error(8, 3, ErrorBody::InvalOption));
        assert_eq!(ErrorBody::InvalOption.code(), 3);
        encode_eq(&h, &ERR_INVAL_OPTION);

        let mut out = [0u8; 28];
        assert_eq!(encode_version_error(7, 2, 1, 1, 1, &mut out), Ok(28));
        assert_eq!(out, ERR_VERS);
        assert_eq!(encode_version_error(7, 2, 1, 1, 1, &mut out[..27]), Err(V2Error::Xdr(XdrError::NoSpace)));
    }

    #[test]
    fn optional_vector() {
        let (h, payload) = Header::decode(&OPTIONAL).unwrap();
        assert_eq!(payload, b"PAY!");
        assert_eq!(
            h,
            Header { xid: 9, credit: 1, body: Body::Optional(Optional { direction: Direction::Reply, opttype: 256, optinfo: b"abcde" }) }
        );
        encode_eq(&h, &OPTIONAL[..OPTIONAL_HDR_LEN]);
    }

    #[test]
    fn truncation_at_every_offset_fails() {
        for (v, hdr_len) in VECTORS {
            for cut in 0..v.len() {
                let r = Header::decode(&v[..cut]);
                if cut < hdr_len {
                    assert!(matches!(r, Err(V2Error::Xdr(XdrError::Truncated { .. }))), "cut {cut} of {v:?}: {r:?}");
                } else {
                    assert_eq!(r.unwrap().1.len(), cut - hdr_len);
                }
            }
        }
    }

    #[test]
    fn prefix_classifies_versions() {
        assert_eq!(ProtocolVersion::of(&peek(&MSG_CALL).unwrap()), ProtocolVersion::V2);
        let v1 = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        let p = peek(&v1).unwrap();
        assert_eq!(p, Prefix { xid: 1, vers: 1, credits: 1, procedure: 0 });
        assert_eq!(ProtocolVersion::of(&p), ProtocolVersion::V1);
        let v3 = [0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(ProtocolVersion::of(&peek(&v3).unwrap()), ProtocolVersion::Unknown(3));
        assert!(peek(&v3[..15]).is_err());
        assert_eq!(Header::decode(&v1), Err(V2Error::BadVersion(1)));
        assert_eq!(V2Error::BadVersion(3).reply(), ErrorBody::Vers { low: 1, high: 2 });
        assert_eq!(V2Error::BadProc(2).reply(), ErrorBody::BadHeader);
    }

    #[test]
    fn bad_discriminants() {
        let mut v = NOMSG_REPLY;
        for p in [2u8, 3, 6, 0xff] {
            v[15] = p;
            assert_eq!(Header::decode(&v), Err(V2Error::BadProc(u32::from(p))), "proc {p}");
        }
        let mut v = NOMSG_REPLY;
        v[19] = 2;
        assert_eq!(Header::decode(&v), Err(V2Error::BadDirection(2)));
        let mut v = NOMSG_REPLY;
        v[23] = 2; // read list discriminator
        assert_eq!(Header::decode(&v), Err(V2Error::Xdr(XdrError::BadBool(2))));
        let mut v = NOMSG_REPLY;
        v[31] = 7; // reply chunk discriminator
        assert_eq!(Header::decode(&v), Err(V2Error::Xdr(XdrError::BadBool(7))));
        let mut v = ERR_BAD_HEADER;
        v[19] = 4;
        assert_eq!(Header::decode(&v), Err(V2Error::BadErrorCode(4)));
        let mut v = OPTIONAL;
        v[16] = 0x80;
        assert_eq!(Header::decode(&v), Err(V2Error::BadDirection(0x8000_0001)));
    }

    #[test]
    fn huge_counts_and_lengths_fail_fast() {
        // Reply chunk claiming 0xffffffff segments.
        let mut v = [0u8; 40];
        v[..32].copy_from_slice(&NOMSG_REPLY);
        v[31] = 1;
        v[32..36].copy_from_slice(&[0xff; 4]);
        assert_eq!(Header::decode(&v[..36]), Err(V2Error::LimitExceeded(Limit::ChunkSegments)));
        assert!(matches!(Header::decode_with(&v[..36], &Limits::UNLIMITED), Err(V2Error::Xdr(XdrError::Truncated { .. }))));
        // A count just within the limit but beyond the buffer.
        v[32..36].copy_from_slice(&[0, 0, 0, 100]);
        assert!(matches!(Header::decode(&v), Err(V2Error::Xdr(XdrError::Truncated { at: 36, .. }))));
        // Optinfo length 0xffffffff.
        let mut o = OPTIONAL;
        o[24..28].copy_from_slice(&[0xff; 4]);
        assert_eq!(Header::decode(&o), Err(V2Error::Xdr(XdrError::TooLong { len: u32::MAX, max: 65536 })));
        assert!(matches!(Header::decode_with(&o, &Limits::UNLIMITED), Err(V2Error::Xdr(XdrError::Truncated { .. }))));
    }

    /// Encodes a NOMSG header with `n` read segments, `w` write chunks of `s`
    /// segments each, into `buf`.
    fn many(buf: &mut [u8], n: usize, w: usize, s: usize) -> usize {
        let reads = [ReadSegment::default(); 200];
        let segs = [Segment::default(); 200];
        let chunk: [&[Segment]; 20] = [&segs[..s]; 20];
        let h = Header {
            xid: 1,
            credit: 1,
            body: Body::NoMsg(Chunks {
                direction: Direction::Call,
                lists: ChunkLists { reads: &reads[..n], writes: &chunk[..w], reply: None },
            }),
        };
        h.encode(buf).unwrap()
    }

    #[test]
    fn limits_are_enforced() {
        let mut buf = [0u8; 8192];
        let lim = Limits {
            chunks: v1::Limits { max_read_segments: 3, max_write_chunks: 2, max_chunk_segments: 4, ..v1::Limits::UNBOUNDED },
            max_optinfo_len: 4,
        };
        let n = many(&mut buf, 3, 2, 4);
        assert!(Header::decode_with(&buf[..n], &lim).is_ok());
        let n = many(&mut buf, 4, 0, 0);
        assert_eq!(Header::decode_with(&buf[..n], &lim), Err(V2Error::LimitExceeded(Limit::ReadSegments)));
        let n = many(&mut buf, 0, 3, 1);
        assert_eq!(Header::decode_with(&buf[..n], &lim), Err(V2Error::LimitExceeded(Limit::WriteChunks)));
        let n = many(&mut buf, 0, 1, 5);
        assert_eq!(Header::decode_with(&buf[..n], &lim), Err(V2Error::LimitExceeded(Limit::ChunkSegments)));
        assert_eq!(Header::decode_with(&OPTIONAL, &lim), Err(V2Error::Xdr(XdrError::TooLong { len: 5, max: 4 })));
        // Defaults: 128 read segments fit, 129 do not.
        let n = many(&mut buf, 128, 0, 0);
        assert!(Header::decode(&buf[..n]).is_ok());
        let n = many(&mut buf, 129, 0, 0);
        assert_eq!(Header::decode(&buf[..n]), Err(V2Error::LimitExceeded(Limit::ReadSegments)));
        assert!(Header::decode_with(&buf[..n], &Limits::UNLIMITED).is_ok());
    }

    #[test]
    fn encode_needs_space_and_writes_nothing_on_failure() {
        let (h, _) = Header::decode(&MSG_CALL).unwrap();
        let mut out = [0x5au8; MSG_CALL_HDR_LEN];
        for len in 0..MSG_CALL_HDR_LEN {
            assert_eq!(h.encode(&mut out[..len]), Err(V2Error::Xdr(XdrError::NoSpace)));
        }
        assert!(out.iter().all(|&b| b == 0x5a));
        assert_eq!(h.encode(&mut out), Ok(MSG_CALL_HDR_LEN));
    }

    // ---- Version negotiation (section 5) ----

    fn words(ws: &[u32], out: &mut [u8; 64]) -> usize {
        for (i, w) in ws.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        ws.len() * 4
    }

    #[test]
    fn negotiation_decisions() {
        let mut b = [0u8; 64];
        // A v1 responder's ERR_VERS, vers field 1 (RFC 8166 style).
        let n = words(&[7, 1, 1, 4, 1, 1, 1], &mut b);
        assert_eq!(probe_reply(7, &b[..n]), Decision::FallBackToV1 { low: 1, high: 1 });
        // Linux svcrdma echoes the requester's version (2).
        assert_eq!(probe_reply(7, &ERR_VERS), Decision::FallBackToV1 { low: 1, high: 1 });
        // Range that includes 2 although 2 was refused: fall back, no loop.
        let n = words(&[7, 1, 1, 4, 1, 1, 3], &mut b);
        assert_eq!(probe_reply(7, &b[..n]), Decision::FallBackToV1 { low: 1, high: 3 });
        for (lo, hi) in [(2, 2), (3, 4), (0, 0), (5, 1)] {
            let n = words(&[7, 1, 1, 4, 1, lo, hi], &mut b);
            assert_eq!(probe_reply(7, &b[..n]), Decision::NoCommonVersion { low: lo, high: hi });
        }
        // Truncated ERR_VERS.
        let n = words(&[7, 1, 1, 4, 1, 1], &mut b);
        assert!(matches!(probe_reply(7, &b[..n]), Decision::Malformed(_)));
        // Other XID.
        assert_eq!(probe_reply(8, &ERR_VERS), Decision::NotForProbe);
        // The responder's own RDMA2_OPTIONAL ahead of the answer (its
        // ROPT_INITXCH): read as Version Two, nothing settled. Not a
        // Version One message with the same words, nor one cut short.
        assert_eq!(probe_reply(7, &OPTIONAL), Decision::OptionalBeforeAnswer);
        let mut v1_optional = OPTIONAL;
        v1_optional[7] = 1;
        assert_eq!(probe_reply(7, &v1_optional), Decision::NotForProbe);
        assert_eq!(probe_reply(7, &OPTIONAL[..22]), Decision::NotForProbe);
        // A non-error v2 reply.
        assert_eq!(probe_reply(0xdead_beef, &NOMSG_REPLY), Decision::UseV2 { credit: 128 });
        assert_eq!(probe_reply(9, &OPTIONAL), Decision::UseV2 { credit: 1 });
        // A v2 CALL with the same XID number is from the other XID space.
        assert_eq!(probe_reply(0x1122_3344, &MSG_CALL), Decision::NotForProbe);
        // Other v2 errors.
        assert_eq!(probe_reply(7, &ERR_BAD_HEADER), Decision::RejectedV2(ErrorBody::BadHeader));
        assert_eq!(probe_reply(8, &ERR_INVAL_OPTION), Decision::RejectedV2(ErrorBody::InvalOption));
        // A v1 non-error reply to a v2 call violates section 5.3.
        let n = words(&[7, 1, 1, 0, 0, 0, 0], &mut b);
        assert_eq!(probe_reply(7, &b[..n]), Decision::UnexpectedVersion(1));
        // Garbage.
        assert!(matches!(probe_reply(7, &[0, 0, 0, 7, 0]), Decision::Malformed(_)));
        let mut bad = NOMSG_REPLY;
        bad[19] = 9;
        assert_eq!(probe_reply(0xdead_beef, &bad), Decision::Malformed(V2Error::BadDirection(9)));
    }

    #[test]
    fn thresholds_fit_the_probe_until_the_version_is_settled() {
        // A CM exchange of 8 KiB both ways, a responder saying 16 KiB.
        let cm = cm::Negotiated { send_threshold: 8192, recv_threshold: 8192, remote_invalidate: true };
        let (mut c, rbsiz) = (ConnVersion::start(true, true, false, 8192), 16384);
        assert_eq!(c.inline_thresholds(cm, rbsiz, 8192, 8192, false), (1024, 1024), "before the probe");
        assert_eq!(c.for_call(7), Some(Version::V2));
        assert!(c.probing());
        assert_eq!(c.inline_thresholds(cm, rbsiz, 8192, 8192, false), (1024, 1024), "while probing");
        // Smaller still where the CM exchange says so.
        let small = cm::Negotiated { send_threshold: 512, recv_threshold: 768, remote_invalidate: false };
        assert_eq!(c.inline_thresholds(small, rbsiz, 8192, 8192, false), (512, 768));
        let v2 = ConnVersion::Neg(Negotiation::settled(Version::V2));
        assert_eq!(v2.inline_thresholds(cm, rbsiz, 8192, 8192, false), (8192, 4096));
        assert_eq!(v2.inline_thresholds(cm, 4096, 8192, 2048, false), (4096, 2048));
        // Once the responder has our characteristics: our whole buffer.
        assert_eq!(v2.inline_thresholds(cm, rbsiz, 8192, 8192, true), (8192, 8192));
        assert_eq!(v2.inline_thresholds(cm, 4096, 8192, 2048, true), (4096, 2048));
        let v1 = ConnVersion::Neg(Negotiation::settled(Version::V1));
        assert_eq!(v1.inline_thresholds(cm, rbsiz, 8192, 8192, false), (8192, 8192));
        assert_eq!(v1.inline_thresholds(cm, rbsiz, 8192, 16384, true), (8192, 8192), "Version One: the CM's");
        assert_eq!(ConnVersion::Neg(Negotiation::Failed).inline_thresholds(cm, rbsiz, 8192, 8192, false), (1024, 1024));
    }

    #[test]
    fn negotiation_state_machine() {
        let mut n = Negotiation::start(7);
        assert_eq!(n.inline_threshold(), 1024);
        assert_eq!(n.version(), None);
        assert_eq!(n.next_connection_version(), Some(Version::V1), "lost probe => assume v1");
        assert_eq!(n.on_reply(&NOMSG_REPLY), Decision::NotForProbe);
        assert_eq!(n, Negotiation::Probing { xid: 7 });
        assert_eq!(n.on_reply(&OPTIONAL), Decision::OptionalBeforeAnswer);
        assert_eq!(n, Negotiation::Probing { xid: 7 }, "only the probe's answer settles");
        assert_eq!(n.on_reply(&ERR_VERS), Decision::FallBackToV1 { low: 1, high: 1 });
        assert_eq!(n.version(), Some(Version::V1));
        assert_eq!(n.inline_threshold(), 1024);
        assert_eq!(n.next_connection_version(), Some(Version::V1));
        assert_eq!(n.on_reply(&ERR_VERS), Decision::NotForProbe, "negotiation is over");

        let mut n = Negotiation::start(0xdead_beef);
        assert_eq!(n.on_reply(&NOMSG_REPLY), Decision::UseV2 { credit: 128 });
        assert_eq!(n.version(), Some(Version::V2));
        assert_eq!(n.inline_threshold(), 4096);
        assert_eq!(n.next_connection_version(), Some(Version::V2));

        let mut n = Negotiation::start(7);
        let mut b = [0u8; 64];
        let len = words(&[7, 1, 1, 4, 1, 3, 3], &mut b);
        assert_eq!(n.on_reply(&b[..len]), Decision::NoCommonVersion { low: 3, high: 3 });
        assert_eq!(n, Negotiation::Failed);
        assert_eq!(n.next_connection_version(), None);
        assert_eq!(Negotiation::settled(Version::V1).inline_threshold(), 1024);
        assert_eq!(Version::V2.number(), 2);
        assert_eq!(Version::V1.extra_header_len(), 0);
        assert_eq!(Version::V2.extra_header_len(), 4);
    }

    // ---- Randomized round trips and mutation fuzzing ----

    fn random_segment(rng: &mut Rng) -> Segment {
        Segment { handle: rng.u32(), length: rng.u32(), offset: rng.next() }
    }

    #[test]
    fn round_trips_over_many_shapes() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut out = [0u8; 8192];
        for _ in 0..3000 {
            let mut reads = [ReadSegment::default(); 6];
            let mut segs = [Segment::default(); 24];
            for r in reads.iter_mut() {
                *r = ReadSegment { position: rng.u32(), segment: random_segment(&mut rng) };
            }
            for s in segs.iter_mut() {
                *s = random_segment(&mut rng);
            }
            let mut chunks: [&[Segment]; 4] = [&[]; 4];
            for (i, c) in chunks.iter_mut().enumerate() {
                let k = rng.below(5) as usize;
                *c = &segs[i * 5..i * 5 + k];
            }
            let opt = [0x42u8; 23];
            let direction = if rng.below(2) == 0 { Direction::Call } else { Direction::Reply };
            let chunk_body = Chunks {
                direction,
                lists: ChunkLists {
                    reads: &reads[..rng.below(7) as usize],
                    writes: &chunks[..rng.below(5) as usize],
                    reply: if rng.below(2) == 0 { None } else { Some(&segs[20..20 + rng.below(5) as usize]) },
                },
            };
            let body = match rng.below(7) {
                0 | 1 => Body::Msg(chunk_body),
                2 | 3 => Body::NoMsg(chunk_body),
                4 => Body::Error(match rng.below(3) {
                    0 => ErrorBody::Vers { low: rng.u32(), high: rng.u32() },
                    1 => ErrorBody::BadHeader,
                    _ => ErrorBody::InvalOption,
                }),
                _ => Body::Optional(Optional { direction, opttype: rng.u32(), optinfo: &opt[..rng.below(24) as usize] }),
            };
            let h = Header { xid: rng.u32(), credit: rng.u32(), body };
            let n = h.encode(&mut out).unwrap();
            assert_eq!(n, h.encoded_len());
            assert_eq!(n % 4, 0);
            let (d, rest) = Header::decode(&out[..n]).unwrap();
            assert!(rest.is_empty());
            assert!(same(&d, &h), "{d:?} != {h:?}");
            let mut again = [0u8; 8192];
            assert_eq!(d.encode(&mut again), Ok(n));
            assert_eq!(&again[..n], &out[..n]);
        }
    }

    const INTERESTING: [u32; 8] = [0, 1, 2, 3, 4, 5, 0x7fff_ffff, 0xffff_ffff];

    #[test]
    fn mutation_fuzz_never_panics_and_reencodes() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut buf = [0u8; 512];
        let mut out = [0u8; 1024];
        let mut ok = 0u32;
        for iter in 0..40_000u32 {
            let (v, _) = VECTORS[(iter as usize) % VECTORS.len()];
            let input = mutated(&mut rng, &mut buf, v, &INTERESTING);
            let len = input.len();
            let _ = peek(input).map(|p| ProtocolVersion::of(&p));
            let _ = probe_reply(rng.u32() & 0xf, input);
            if let Ok((h, rest)) = Header::decode(input) {
                ok += 1;
                let hlen = len - rest.len();
                let n = h.encode(&mut out).unwrap();
                assert_eq!(n, hlen, "{h:?}");
                let (h2, rest2) = Header::decode(&out[..n]).unwrap();
                assert!(rest2.is_empty());
                assert_eq!(h2, h);
                if !matches!(h.body, Body::Optional(_)) {
                    assert_eq!(&out[..n], &input[..hlen], "canonical re-encoding");
                }
            }
        }
        assert!(ok > 1000, "mutations should still often decode: {ok}");
    }

    #[test]
    fn connection_start_and_first_calls() {
        let v1 = ConnVersion::Neg(Negotiation::settled(Version::V1));
        // Default policy (2,1): probe a new responder, not a known one.
        assert_eq!(ConnVersion::start(true, true, false, 4096), ConnVersion::Unprobed);
        assert_eq!(ConnVersion::start(true, true, true, 4096), v1);
        // Our Receive buffers too small for Version Two: no probe.
        assert_eq!(ConnVersion::start(true, true, false, 1024), v1);
        // versions=1, and versions=2 (probes even a known responder).
        assert_eq!(ConnVersion::start(true, false, false, 4096), v1);
        assert_eq!(ConnVersion::start(false, true, true, 4096), ConnVersion::Unprobed);
        assert_eq!(ConnVersion::start(false, true, false, 1024), ConnVersion::Neg(Negotiation::Failed));
        // The first call is the probe; calls while it is out go the same way.
        let mut c = ConnVersion::Unprobed;
        assert_eq!(c.for_call(7), Some(Version::V2));
        assert!(c.probing());
        assert_eq!(c.for_call(8), Some(Version::V2));
        // ERR_VERS 1..1 for the probe (Linux echoes rdma_vers 2).
        let mut err = [0u8; 28];
        let n = encode_version_error(7, 2, 1, 1, 1, &mut err).unwrap();
        let ConnVersion::Neg(mut neg) = c else { panic!() };
        assert_eq!(neg.on_reply(&err[..n]), Decision::FallBackToV1 { low: 1, high: 1 });
        let mut c = ConnVersion::Neg(neg);
        assert!(!c.probing());
        assert_eq!(c.for_call(7), Some(Version::V1));
        let mut failed = ConnVersion::Neg(Negotiation::Failed);
        assert_eq!(failed.for_call(9), None);
    }
}
