// SPDX-License-Identifier: GPL-2.0
//! RPC-over-RDMA Version 1 transport header (RFC 8166, formerly RFC 5666).
//!
//! Wire layout, all fields 32-bit big-endian XDR words unless noted:
//!
//! ```text
//! xid | vers (=1) | credits | proc | body
//!
//! body of RDMA_MSG / RDMA_NOMSG:  read list, write list, reply chunk
//! body of RDMA_MSGP (RFC 5666):   align, thresh, read list, write list, reply chunk
//! body of RDMA_DONE (RFC 5666):   nothing (void)
//! body of RDMA_ERROR:             err (1 = ERR_VERS: low, high | 2 = ERR_CHUNK: nothing)
//!
//! segment (16 bytes):       handle, length, offset (64-bit)
//! read segment (24 bytes):  position, segment
//! read list:    { 1, read segment }* 0
//! write list:   { 1, count, segment[count] }* 0
//! reply chunk:  0 | 1, count, segment[count]
//! ```
//!
//! An RDMA_MSG or RDMA_MSGP header is followed by the RPC message; the
//! decoders report where it starts ([`Header::header_len`]).
//!
//! RFC 8166 retires RDMA_MSGP and RDMA_DONE. They are still decoded and
//! encoded here so that tests can produce them and a peer can recognise and
//! reject them; whether to accept them is the caller's policy.
//!
//! Decoding is zero-copy: chunk lists are returned as validated views
//! ([`ReadList`], [`WriteList`], [`SegmentArray`]) over the input bytes whose
//! iterators yield plain [`ReadSegment`] and [`Segment`] values. Every count
//! is checked against [`Limits`] and against the bytes actually present
//! before anything is iterated. Decoding checks syntax only (the XDR); rules
//! such as "a position-zero read chunk only in RDMA_NOMSG" are left to the
//! caller.

use super::xdr::{Words, XdrError, XdrReader, XdrWriter};
use core::fmt;
use core::marker::PhantomData;

/// The protocol version this module implements.
pub const VERSION: u32 = 1;

/// Procedure: RPC message follows the chunk lists inline.
pub const RDMA_MSG: u32 = 0;
/// Procedure: no RPC message follows; it travels in a chunk.
pub const RDMA_NOMSG: u32 = 1;
/// Procedure: padded message (RFC 5666 only; retired by RFC 8166).
pub const RDMA_MSGP: u32 = 2;
/// Procedure: client signals completion of reply read chunks (RFC 5666 only; retired by RFC 8166).
pub const RDMA_DONE: u32 = 3;
/// Procedure: transport header error report.
pub const RDMA_ERROR: u32 = 4;

/// RDMA_ERROR code: version not supported; the supported range follows.
pub const ERR_VERS: u32 = 1;
/// RDMA_ERROR code: the header or its chunks could not be parsed.
pub const ERR_CHUNK: u32 = 2;

/// Length of the fixed prefix every header starts with: xid, vers, credits, proc.
pub const FIXED_HEADER_LEN: usize = 16;
/// Encoded length of a [`Segment`]: handle, length, 64-bit offset.
pub const SEGMENT_LEN: usize = 16;
/// Encoded length of a [`ReadSegment`]: position plus a segment (20 bytes).
pub const READ_SEGMENT_LEN: usize = 4 + SEGMENT_LEN;
/// Encoded length of one read list entry: the "present" word plus a read
/// segment (24 bytes; the size that bounds how many fit in a header).
pub const READ_LIST_ENTRY_LEN: usize = 4 + READ_SEGMENT_LEN;
/// Encoded length of three empty chunk lists (three zero words).
pub const EMPTY_CHUNK_LISTS_LEN: usize = 12;
/// Smallest RDMA_MSG or RDMA_NOMSG header: fixed prefix plus three empty chunk lists.
pub const MIN_MSG_HEADER_LEN: usize = FIXED_HEADER_LEN + EMPTY_CHUNK_LISTS_LEN;
/// Extra length of RDMA_MSGP over RDMA_MSG: the align and thresh words.
pub const MSGP_PAD_FIELDS_LEN: usize = 8;
/// Smallest RDMA_MSGP header: fixed prefix, align, thresh, three empty chunk lists.
pub const MIN_MSGP_HEADER_LEN: usize = MIN_MSG_HEADER_LEN + MSGP_PAD_FIELDS_LEN;
/// Length of an RDMA_DONE header (its body is void).
pub const DONE_HEADER_LEN: usize = FIXED_HEADER_LEN;
/// Length of an RDMA_ERROR header carrying ERR_VERS (error code, low, high).
pub const ERR_VERS_HEADER_LEN: usize = FIXED_HEADER_LEN + 12;
/// Length of an RDMA_ERROR header carrying ERR_CHUNK (error code only).
pub const ERR_CHUNK_HEADER_LEN: usize = FIXED_HEADER_LEN + 4;
/// Shortest valid header of any procedure (RDMA_DONE).
pub const MIN_HEADER_LEN: usize = DONE_HEADER_LEN;

/// An RPC-over-RDMA version 1 decode or encode failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V1Error {
    /// XDR-level failure: input truncated, a "present" flag that is not 0 or 1,
    /// or (when encoding) an output buffer that is too small.
    Xdr(XdrError),
    /// The header's version is not 1. Carries the whole prefix so the caller can
    /// answer with ERR_VERS (and avoid answering an RDMA_ERROR with another).
    VersionMismatch(Prefix),
    /// The procedure number is not one of RDMA_MSG..RDMA_ERROR.
    BadProc(u32),
    /// An RDMA_ERROR carried an error code other than ERR_VERS or ERR_CHUNK.
    BadErrorCode(u32),
    /// The read list has more entries than [`Limits::max_read_segments`].
    TooManyReadSegments {
        /// The limit that was exceeded.
        max: u32,
    },
    /// The write list has more chunks than [`Limits::max_write_chunks`].
    TooManyWriteChunks {
        /// The limit that was exceeded.
        max: u32,
    },
    /// The write list has more segments in total than [`Limits::max_write_segments`].
    TooManyWriteSegments {
        /// The limit that was exceeded.
        max: u32,
    },
    /// A write chunk or the reply chunk declares more segments than
    /// [`Limits::max_chunk_segments`].
    TooManyChunkSegments {
        /// Segment count found on the wire.
        count: u32,
        /// The limit that was exceeded.
        max: u32,
    },
}

impl From<XdrError> for V1Error {
    fn from(e: XdrError) -> Self {
        V1Error::Xdr(e)
    }
}

/// Shorthand for the encoder's "output buffer too small" error.
const NO_SPACE: V1Error = V1Error::Xdr(XdrError::NoSpace);

/// The procedure of a version 1 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proc {
    /// RDMA_MSG (0).
    Msg,
    /// RDMA_NOMSG (1).
    NoMsg,
    /// RDMA_MSGP (2), RFC 5666 only.
    Msgp,
    /// RDMA_DONE (3), RFC 5666 only.
    Done,
    /// RDMA_ERROR (4).
    Error,
}

impl Proc {
    /// Maps a wire procedure number to a [`Proc`], or `None` if unknown.
    pub const fn from_u32(v: u32) -> Option<Proc> {
        match v {
            RDMA_MSG => Some(Proc::Msg),
            RDMA_NOMSG => Some(Proc::NoMsg),
            RDMA_MSGP => Some(Proc::Msgp),
            RDMA_DONE => Some(Proc::Done),
            RDMA_ERROR => Some(Proc::Error),
            _ => None,
        }
    }

    /// The wire procedure number.
    pub const fn to_u32(self) -> u32 {
        match self {
            Proc::Msg => RDMA_MSG,
            Proc::NoMsg => RDMA_NOMSG,
            Proc::Msgp => RDMA_MSGP,
            Proc::Done => RDMA_DONE,
            Proc::Error => RDMA_ERROR,
        }
    }
}

/// The fixed 16-byte prefix of every RPC-over-RDMA header, as raw words.
///
/// Its layout is the same in every protocol version, so it can be read before
/// the version is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Transaction ID, mirroring the RPC message's XID.
    pub xid: u32,
    /// Protocol version.
    pub vers: u32,
    /// Credits requested (calls) or granted (replies).
    pub credits: u32,
    /// Procedure number, not yet validated.
    pub procedure: u32,
}

impl Prefix {
    /// Reads the four prefix words from `r`, validating nothing.
    #[inline]
    pub fn read(r: &mut XdrReader<'_>) -> Result<Prefix, XdrError> {
        // Every message starts with them: 16 bytes taken at once, one
        // bounds check rather than four. A shorter message is read word by
        // word, so that the error says which word is missing.
        let Ok(&[x0, x1, x2, x3, v0, v1, v2, v3, c0, c1, c2, c3, p0, p1, p2, p3]) = r.array::<FIXED_HEADER_LEN>() else {
            return Ok(Prefix { xid: r.u32()?, vers: r.u32()?, credits: r.u32()?, procedure: r.u32()? });
        };
        Ok(Prefix {
            xid: u32::from_be_bytes([x0, x1, x2, x3]),
            vers: u32::from_be_bytes([v0, v1, v2, v3]),
            credits: u32::from_be_bytes([c0, c1, c2, c3]),
            procedure: u32::from_be_bytes([p0, p1, p2, p3]),
        })
    }

    /// Writes the four prefix words to `w` as they are.
    pub fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        w.put_u32(self.xid)?;
        w.put_u32(self.vers)?;
        w.put_u32(self.credits)?;
        w.put_u32(self.procedure)
    }
}

/// Reads the fixed 16-byte prefix without validating the version or procedure.
pub fn peek(buf: &[u8]) -> Result<Prefix, V1Error> {
    Ok(Prefix::read(&mut XdrReader::new(buf))?)
}

/// Decodes the header of nearly every reply that is all inline: an
/// RDMA_MSG of version one with no chunk (XID, version, credits, RDMA_MSG,
/// then three empty lists: 28 bytes, taken at once). Gives its XID, its
/// credit field and the bytes after it, as [`Header::decode_split`] gives
/// them for such a header (a unit test checks it), without building its
/// chunk lists; `None` for any other header, whatever it is.
#[inline(always)]
pub fn decode_plain_msg(buf: &[u8]) -> Option<(u32, u32, &[u8])> {
    const LEN: usize = FIXED_HEADER_LEN + EMPTY_CHUNK_LISTS_LEN;
    let (h, payload) = buf.split_first_chunk::<LEN>()?;
    let [x0, x1, x2, x3, v0, v1, v2, v3, c0, c1, c2, c3, rest @ ..] = *h;
    if u32::from_be_bytes([v0, v1, v2, v3]) != VERSION || rest != [0; LEN - 12] {
        return None;
    }
    Some((u32::from_be_bytes([x0, x1, x2, x3]), u32::from_be_bytes([c0, c1, c2, c3]), payload))
}

/// Decodes the header of nearly every reply whose payload the server
/// wrote into the call's pages (a READ's): an RDMA_MSG of version one with
/// no Read list, one Write chunk of one segment and no Reply chunk (52
/// bytes, taken at once). Gives its XID, its credit field, the chunk's
/// segments and the bytes after it, as [`Header::decode_split`] gives them
/// for such a header under [`Limits::DEFAULT`] (a unit test checks it);
/// `None` for any other header, whatever it is.
#[inline(always)]
pub fn decode_one_write_msg(buf: &[u8]) -> Option<(u32, u32, SegmentArray<'_>, &[u8])> {
    const LEN: usize = FIXED_HEADER_LEN + 12 + SEGMENT_LEN + 8;
    let (h, payload) = buf.split_first_chunk::<LEN>()?;
    let [x0, x1, x2, x3, v0, v1, v2, v3, c0, c1, c2, c3, p0, p1, p2, p3, ref lists @ ..] = *h;
    let (first, rest) = lists.split_first_chunk::<12>()?;
    let (segment, last) = rest.split_first_chunk::<SEGMENT_LEN>()?;
    if u32::from_be_bytes([v0, v1, v2, v3]) != VERSION
        || u32::from_be_bytes([p0, p1, p2, p3]) != RDMA_MSG
        || *first != ONE_WRITE_SEGMENT_FIRST
        || *last != [0; 8]
    {
        return None;
    }
    let xid = u32::from_be_bytes([x0, x1, x2, x3]);
    let credits = u32::from_be_bytes([c0, c1, c2, c3]);
    Some((xid, credits, SegmentArray { bytes: Records::new(segment) }, payload))
}

/// The chunk lists' words before the segment when they are no Read list
/// and one Write chunk of one segment: Read list end, Write chunk present,
/// one segment (both shortcuts for that shape test them).
const ONE_WRITE_SEGMENT_FIRST: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];

/// One registered memory segment: RDMA handle (steering tag), length, offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    /// Registered memory handle (steering tag).
    pub handle: u32,
    /// Length of the segment in bytes.
    pub length: u32,
    /// Offset or virtual address of the segment.
    pub offset: u64,
}

impl Segment {
    #[inline]
    fn read(r: &mut XdrReader<'_>) -> Result<Segment, XdrError> {
        Ok(Segment { handle: r.u32()?, length: r.u32()?, offset: r.u64()? })
    }

    /// The segment encoded in `b`: what [`Segment::read`] reads, without
    /// a bounds check per word.
    #[inline]
    fn from_bytes(b: &[u8; SEGMENT_LEN]) -> Segment {
        let [h0, h1, h2, h3, l0, l1, l2, l3, o0, o1, o2, o3, o4, o5, o6, o7] = *b;
        Segment {
            handle: u32::from_be_bytes([h0, h1, h2, h3]),
            length: u32::from_be_bytes([l0, l1, l2, l3]),
            offset: u64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        }
    }
}

/// One read list entry: the XDR position of the data plus its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadSegment {
    /// Byte offset in the RPC message's XDR stream where the data belongs.
    pub position: u32,
    /// Where the data is in the sender's memory.
    pub segment: Segment,
}

impl ReadSegment {
    #[inline]
    fn read(r: &mut XdrReader<'_>) -> Result<ReadSegment, XdrError> {
        Ok(ReadSegment { position: r.u32()?, segment: Segment::read(r)? })
    }
}

/// Upper bounds applied while decoding chunk lists.
///
/// The input length already bounds every count (each entry needs bytes that
/// must be present), so these limits are resource policy: they stop a peer
/// from making the receiver set up more RDMA operations per message than it
/// is prepared to. A count over a limit fails with a typed error before any
/// entry is iterated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries in the read list (all read chunks together).
    pub max_read_segments: u32,
    /// Most chunks in the write list.
    pub max_write_chunks: u32,
    /// Most segments in any single write chunk or in the reply chunk.
    pub max_chunk_segments: u32,
    /// Most segments in the whole write list.
    pub max_write_segments: u32,
}

impl Limits {
    /// Generous defaults: 256 segments per chunk (1 MiB in 4 KiB pages), 256
    /// read segments, 32 write chunks, 1024 write segments in all. A kernel
    /// caller should derive its own limits from what it can actually map.
    pub const DEFAULT: Limits = Limits {
        max_read_segments: 256,
        max_write_chunks: 32,
        max_chunk_segments: 256,
        max_write_segments: 1024,
    };

    /// No policy limit: only the input length bounds the counts.
    pub const UNBOUNDED: Limits = Limits {
        max_read_segments: u32::MAX,
        max_write_chunks: u32::MAX,
        max_chunk_segments: u32::MAX,
        max_write_segments: u32::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Consumes `count` encoded segments, failing fast if they cannot be present.
fn take_segments<'a>(r: &mut XdrReader<'a>, count: u32) -> Result<&'a [u8], XdrError> {
    let at = r.position();
    let n = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(SEGMENT_LEN))
        .ok_or(XdrError::Truncated { at, need: usize::MAX })?;
    r.take(n)
}

/// An element of a fixed-stride view ([`Records`]): decoded from the first
/// [`Record::LEN`] bytes of a slice.
trait Record: Sized {
    /// Encoded length of one element.
    const LEN: usize;

    /// Decodes the element at the start of `bytes`.
    fn parse(bytes: &[u8]) -> Option<Self>;

    /// Length of the element's segment, for [`Records::total_length`].
    fn length(&self) -> u32;
}

impl Record for Segment {
    const LEN: usize = SEGMENT_LEN;

    #[inline]
    fn parse(bytes: &[u8]) -> Option<Segment> {
        Some(Segment::from_bytes(bytes.first_chunk()?))
    }

    fn length(&self) -> u32 {
        self.length
    }
}

/// A read list entry: the present word, then a read segment.
impl Record for ReadSegment {
    const LEN: usize = READ_LIST_ENTRY_LEN;

    #[inline]
    fn parse(bytes: &[u8]) -> Option<ReadSegment> {
        // The present word, the position, the segment.
        let (_, rest) = bytes.split_first_chunk::<4>()?;
        let (position, segment) = rest.split_first_chunk::<4>()?;
        Some(ReadSegment { position: u32::from_be_bytes(*position), segment: Segment::from_bytes(segment.first_chunk()?) })
    }

    fn length(&self) -> u32 {
        self.segment.length
    }
}

/// Validated elements of type `T`, back to back with no count word: the body
/// shared by [`SegmentArray`] and [`ReadList`] and their iterators.
///
/// Only a decoder builds one, over exactly `len() * T::LEN` bytes it has
/// checked, so no element fails to parse; should one, the view ends there.
/// Formats as its bytes, so the views print as they always have.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Records<'a, T> {
    bytes: &'a [u8],
    record: PhantomData<fn() -> T>,
}

impl<'a, T: Record> Records<'a, T> {
    const fn new(bytes: &'a [u8]) -> Self {
        Records { bytes, record: PhantomData }
    }

    fn len(&self) -> usize {
        self.bytes.len() / T::LEN
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    #[inline]
    fn get(&self, index: usize) -> Option<T> {
        let start = index.checked_mul(T::LEN)?;
        T::parse(self.bytes.get(start..)?)
    }

    /// Removes and returns the first element (the step of every iterator).
    fn pop_front(&mut self) -> Option<T> {
        // `get` rather than `split_at_checked`: the kernel's minimum rustc
        // is 1.78.
        let (first, rest) = (self.bytes.get(..T::LEN)?, self.bytes.get(T::LEN..)?);
        let element = T::parse(first)?;
        self.bytes = rest;
        Some(element)
    }

    /// The first `n` elements and the rest.
    fn split_at(&self, n: usize) -> Option<(Self, Self)> {
        let at = n.checked_mul(T::LEN)?;
        let (head, tail) = (self.bytes.get(..at)?, self.bytes.get(at..)?);
        Some((Records::new(head), Records::new(tail)))
    }

    /// Sum of the segment lengths (cannot overflow: at most 2^32 lengths of 32 bits).
    fn total_length(mut self) -> u64 {
        let mut sum = 0u64;
        while let Some(element) = self.pop_front() {
            sum = sum.saturating_add(u64::from(element.length()));
        }
        sum
    }

    /// The remaining length, exactly, as an iterator's size hint.
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len(), Some(self.len()))
    }
}

impl<T> fmt::Debug for Records<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.bytes.fmt(f)
    }
}

/// A validated array of segments (a write chunk or the reply chunk), borrowed
/// from the decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentArray<'a> {
    /// The encoded segments, without the count word.
    bytes: Records<'a, Segment>,
}

impl<'a> SegmentArray<'a> {
    /// An array with no segments.
    pub const EMPTY: SegmentArray<'static> = SegmentArray { bytes: Records::new(&[]) };

    /// Decodes a counted segment array (count word, segments).
    #[inline]
    pub fn decode(r: &mut XdrReader<'a>, limits: &Limits) -> Result<SegmentArray<'a>, V1Error> {
        let count = r.u32()?;
        if count > limits.max_chunk_segments {
            return Err(V1Error::TooManyChunkSegments { count, max: limits.max_chunk_segments });
        }
        Ok(SegmentArray { bytes: Records::new(take_segments(r, count)?) })
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True if there are no segments.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The segment at `index`, if any.
    #[inline]
    pub fn get(&self, index: usize) -> Option<Segment> {
        self.bytes.get(index)
    }

    /// Iterates over the segments.
    pub fn iter(&self) -> SegmentIter<'a> {
        SegmentIter { rest: self.bytes }
    }

    /// Sum of the segment lengths (cannot overflow: at most 2^32 lengths of 32 bits).
    pub fn total_length(&self) -> u64 {
        self.bytes.total_length()
    }

    /// The encoded segments, without the count word.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes.bytes
    }

    /// Encoded length as a counted array (count word plus segments).
    fn counted_len(&self) -> usize {
        self.bytes.bytes.len().saturating_add(4)
    }

    fn write_counted(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        let count = u32::try_from(self.len()).map_err(|_| NO_SPACE)?;
        w.put_u32(count)?;
        w.put_bytes(self.bytes.bytes)?;
        Ok(())
    }
}

/// Why a Write or Reply chunk returned in a reply does not match the one
/// the requester offered in its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnedChunkError {
    /// The responder returned more segments than were offered.
    TooManySegments {
        /// Segments returned.
        returned: usize,
        /// Segments offered.
        offered: usize,
    },
    /// A segment's handle or offset is not the one offered at its place:
    /// the responder claims to have written memory it was never given.
    ForeignSegment {
        /// Index of the segment in the chunk.
        index: usize,
    },
    /// A segment claims more bytes than its offered length.
    TooLong {
        /// Index of the segment in the chunk.
        index: usize,
    },
    /// A segment claims bytes although an earlier one was left short: the
    /// bytes between them were never written, yet they would sit inside
    /// the result the requester hands up.
    Gap {
        /// Index of the first non-empty segment after a short one.
        index: usize,
    },
}

/// Checks a Write chunk or Reply chunk as a responder returned it against
/// the segments the requester offered for it, and returns the bytes the
/// responder says it wrote.
///
/// The responder hands the chunk back with each segment's length rewritten
/// to what it wrote (RFC 8166, sections 3.4.6 and 4.3): it fills the
/// segments in the order offered, so every segment before the last one it
/// wrote into is full, and it cannot add segments or move them. A returned
/// segment must therefore carry, at its place in the chunk, the handle and
/// offset offered there and at most the length offered, and once one
/// segment is short every later one must be empty. The requester takes
/// the result as the first "total" bytes of the memory the chunk covers;
/// only under these rules are all of them bytes the responder wrote.
/// Trusting anything else would let a peer claim to have written memory
/// it never had access to, or leave unwritten bytes in the middle of a
/// result, and the requester would hand stale bytes to the application as
/// if they had arrived.
#[inline(always)]
pub fn check_returned_chunk(offered: &[Segment], returned: &SegmentArray<'_>) -> Result<u64, ReturnedChunkError> {
    // The usual chunk (a READ's Write chunk): one segment offered, one
    // returned, checked without the loop.
    if let ([want], Some(got), 1) = (offered, returned.get(0), returned.len()) {
        if got.handle != want.handle || got.offset != want.offset {
            return Err(ReturnedChunkError::ForeignSegment { index: 0 });
        }
        if got.length > want.length {
            return Err(ReturnedChunkError::TooLong { index: 0 });
        }
        return Ok(u64::from(got.length));
    }
    check_returned_chunk_loop(offered, returned)
}

/// [`check_returned_chunk`] of any number of segments.
#[inline(never)]
fn check_returned_chunk_loop(offered: &[Segment], returned: &SegmentArray<'_>) -> Result<u64, ReturnedChunkError> {
    if returned.len() > offered.len() {
        return Err(ReturnedChunkError::TooManySegments { returned: returned.len(), offered: offered.len() });
    }
    let mut total = 0u64;
    let mut short = false;
    // Indexing a bounded range keeps the loop free of overflow checks.
    for index in 0..returned.len() {
        let (Some(got), Some(want)) = (returned.get(index), offered.get(index)) else { break };
        if got.handle != want.handle || got.offset != want.offset {
            return Err(ReturnedChunkError::ForeignSegment { index });
        }
        if got.length > want.length {
            return Err(ReturnedChunkError::TooLong { index });
        }
        if short && got.length != 0 {
            return Err(ReturnedChunkError::Gap { index });
        }
        short = got.length < want.length;
        total = total.saturating_add(u64::from(got.length));
    }
    Ok(total)
}

/// Why a responder cannot place a result in a chunk ([`fill_chunk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillError {
    /// The chunk's segments hold fewer bytes than the result.
    TooSmall,
    /// The buffer for the returned chunk has room for fewer segments than
    /// the chunk has.
    NoRoom,
}

/// How a responder fills a Write chunk or Reply chunk the requester
/// offered (`offered`) with a result of `len` bytes: in the order offered,
/// each segment full before the next one is used, which is what
/// [`check_returned_chunk`] holds a responder to. Writes the chunk to
/// return into the front of `out`: every offered segment with its handle
/// and offset, and the bytes written into it as its length (0 for those
/// the result did not reach). Returns how many segments that is; the
/// result's bytes go to the segments in that order, each taking its
/// returned length.
pub fn fill_chunk(offered: &[Segment], len: u32, out: &mut [Segment]) -> Result<usize, FillError> {
    let out = out.get_mut(..offered.len()).ok_or(FillError::NoRoom)?;
    let mut left = len;
    for (o, s) in out.iter_mut().zip(offered) {
        let n = left.min(s.length);
        *o = Segment { handle: s.handle, length: n, offset: s.offset };
        left -= n;
    }
    if left > 0 {
        return Err(FillError::TooSmall);
    }
    Ok(offered.len())
}

/// Iterator over the segments of a [`SegmentArray`].
#[derive(Debug, Clone)]
pub struct SegmentIter<'a> {
    rest: Records<'a, Segment>,
}

/// A validated read list, borrowed from the decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadList<'a> {
    /// The entries with their present words, without the terminating zero.
    bytes: Records<'a, ReadSegment>,
}

impl<'a> ReadList<'a> {
    /// An empty read list.
    pub const EMPTY: ReadList<'static> = ReadList { bytes: Records::new(&[]) };

    /// Decodes a read list (entries each preceded by 1, terminated by 0).
    #[inline]
    pub fn decode(r: &mut XdrReader<'a>, limits: &Limits) -> Result<ReadList<'a>, V1Error> {
        let all = r.rest();
        let start = r.position();
        let mut count: u32 = 0;
        let mut end = start;
        while r.bool()? {
            if count >= limits.max_read_segments {
                return Err(V1Error::TooManyReadSegments { max: limits.max_read_segments });
            }
            // Kept as bytes, read again when used: skipped here, whole,
            // or word by word if it is cut short (the error says which
            // word is missing).
            if r.take(READ_SEGMENT_LEN).is_err() {
                ReadSegment::read(r)?;
            }
            count = count.saturating_add(1);
            end = r.position();
        }
        let bytes = all.get(..end.saturating_sub(start)).unwrap_or(&[]);
        Ok(ReadList { bytes: Records::new(bytes) })
    }

    /// Number of read segments.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True if the list is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The read segment at `index`, if any.
    pub fn get(&self, index: usize) -> Option<ReadSegment> {
        self.bytes.get(index)
    }

    /// Iterates over the read segments in wire order.
    pub fn iter(&self) -> ReadIter<'a> {
        ReadIter { rest: self.bytes }
    }

    /// Iterates over read chunks: maximal runs of consecutive segments that
    /// share one position.
    pub fn chunks(&self) -> ReadChunks<'a> {
        ReadChunks { rest: self.bytes }
    }

    /// Sum of the segment lengths.
    pub fn total_length(&self) -> u64 {
        self.bytes.total_length()
    }

    fn encoded_len(&self) -> usize {
        terminated_list_len(self.bytes.bytes)
    }

    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        write_terminated_list(w, self.bytes.bytes)
    }
}

/// Iterator over the segments of a [`ReadList`].
#[derive(Debug, Clone)]
pub struct ReadIter<'a> {
    rest: Records<'a, ReadSegment>,
}

/// One read chunk: consecutive read segments with the same position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadChunk<'a> {
    /// The XDR position shared by the segments.
    pub position: u32,
    /// The chunk's segments (never empty).
    pub segments: ReadList<'a>,
}

/// Iterator over the chunks of a [`ReadList`].
#[derive(Debug, Clone)]
pub struct ReadChunks<'a> {
    rest: Records<'a, ReadSegment>,
}

impl<'a> Iterator for ReadChunks<'a> {
    type Item = ReadChunk<'a>;

    fn next(&mut self) -> Option<ReadChunk<'a>> {
        let first = self.rest.get(0)?;
        let mut n = 1;
        while let Some(next) = self.rest.get(n) {
            if next.position != first.position {
                break;
            }
            n = n.saturating_add(1);
        }
        let (chunk, rest) = self.rest.split_at(n)?;
        self.rest = rest;
        Some(ReadChunk { position: first.position, segments: ReadList { bytes: chunk } })
    }
}

impl core::iter::FusedIterator for ReadChunks<'_> {}

/// A validated write list, borrowed from the decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteList<'a> {
    /// The chunks as encoded (present word, count, segments), without the
    /// terminating zero.
    bytes: &'a [u8],
    chunks: usize,
    segments: usize,
}

impl<'a> WriteList<'a> {
    /// An empty write list.
    pub const EMPTY: WriteList<'static> = WriteList { bytes: &[], chunks: 0, segments: 0 };

    /// Decodes a write list (chunks each preceded by 1, terminated by 0).
    #[inline]
    pub fn decode(r: &mut XdrReader<'a>, limits: &Limits) -> Result<WriteList<'a>, V1Error> {
        let all = r.rest();
        let start = r.position();
        let mut chunks: u32 = 0;
        let mut segments: u32 = 0;
        let mut end = start;
        while r.bool()? {
            if chunks >= limits.max_write_chunks {
                return Err(V1Error::TooManyWriteChunks { max: limits.max_write_chunks });
            }
            let count = r.u32()?;
            if count > limits.max_chunk_segments {
                return Err(V1Error::TooManyChunkSegments { count, max: limits.max_chunk_segments });
            }
            segments = match segments.checked_add(count) {
                Some(s) if s <= limits.max_write_segments => s,
                _ => return Err(V1Error::TooManyWriteSegments { max: limits.max_write_segments }),
            };
            take_segments(r, count)?;
            chunks = chunks.saturating_add(1);
            end = r.position();
        }
        let bytes = all.get(..end.saturating_sub(start)).unwrap_or(&[]);
        let chunks = usize::try_from(chunks).unwrap_or(usize::MAX);
        let segments = usize::try_from(segments).unwrap_or(usize::MAX);
        Ok(WriteList { bytes, chunks, segments })
    }

    /// Number of write chunks.
    pub fn len(&self) -> usize {
        self.chunks
    }

    /// True if the list is empty.
    pub fn is_empty(&self) -> bool {
        self.chunks == 0
    }

    /// Total number of segments in all chunks.
    pub fn segment_count(&self) -> usize {
        self.segments
    }

    /// Iterates over the write chunks in wire order.
    pub fn iter(&self) -> WriteIter<'a> {
        WriteIter { rest: self.bytes, left: self.chunks }
    }

    /// The chunk at `index` (walks the list), if any.
    pub fn get(&self, index: usize) -> Option<SegmentArray<'a>> {
        self.iter().nth(index)
    }

    /// The list's only chunk, if it has exactly one: what `iter().next()`
    /// gives then, without parsing the chunk's words again.
    #[inline]
    pub fn single(&self) -> Option<SegmentArray<'a>> {
        if self.chunks != 1 {
            return None;
        }
        // A decoded list of one chunk is its present word, its count and
        // its segments, nothing after them.
        Some(SegmentArray { bytes: Records::new(self.bytes.get(8..)?) })
    }

    fn encoded_len(&self) -> usize {
        terminated_list_len(self.bytes)
    }

    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        write_terminated_list(w, self.bytes)
    }
}

/// Iterator over the chunks of a [`WriteList`].
#[derive(Debug, Clone)]
pub struct WriteIter<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for WriteIter<'a> {
    type Item = SegmentArray<'a>;

    #[inline]
    fn next(&mut self) -> Option<SegmentArray<'a>> {
        if self.left == 0 {
            return None;
        }
        let mut r = XdrReader::new(self.rest);
        // The list was validated when decoded; stop quietly if it is not.
        let parsed = match r.u32() {
            Ok(1) => r.u32().and_then(|count| take_segments(&mut r, count)).ok(),
            _ => None,
        };
        match parsed {
            Some(bytes) => {
                self.rest = r.rest();
                self.left -= 1;
                Some(SegmentArray { bytes: Records::new(bytes) })
            }
            None => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// Encoded length of a read or write list: its entries, then the zero word.
fn terminated_list_len(entries: &[u8]) -> usize {
    entries.len().saturating_add(4)
}

/// Writes a read or write list: its encoded entries, then the zero word.
fn write_terminated_list(w: &mut XdrWriter<'_>, entries: &[u8]) -> Result<(), V1Error> {
    w.put_bytes(entries)?;
    w.put_u32(0)?;
    Ok(())
}

/// The iterator traits every view and its iterator share: `IntoIterator` for
/// the view and for a reference to it (both by `iter()`), `ExactSizeIterator`
/// and `FusedIterator`. With `records:`, also `Iterator` itself for an
/// iterator whose `rest` is a [`Records`], which does the stepping.
macro_rules! view_iter_traits {
    (records: $view:ident, $iter:ident, $item:ty) => {
        impl Iterator for $iter<'_> {
            type Item = $item;

            fn next(&mut self) -> Option<$item> {
                self.rest.pop_front()
            }

            fn size_hint(&self) -> (usize, Option<usize>) {
                self.rest.size_hint()
            }
        }

        view_iter_traits!($view, $iter, $item);
    };
    ($view:ident, $iter:ident, $item:ty) => {
        impl<'a> IntoIterator for $view<'a> {
            type Item = $item;
            type IntoIter = $iter<'a>;
            fn into_iter(self) -> $iter<'a> {
                self.iter()
            }
        }

        impl<'a> IntoIterator for &$view<'a> {
            type Item = $item;
            type IntoIter = $iter<'a>;
            fn into_iter(self) -> $iter<'a> {
                self.iter()
            }
        }

        impl ExactSizeIterator for $iter<'_> {}
        impl core::iter::FusedIterator for $iter<'_> {}
    };
}

view_iter_traits!(records: SegmentArray, SegmentIter, Segment);
view_iter_traits!(records: ReadList, ReadIter, ReadSegment);
view_iter_traits!(WriteList, WriteIter, SegmentArray<'a>);

/// Decodes an optional reply chunk (0, or 1 followed by a segment array).
#[inline]
pub fn decode_reply_chunk<'a>(r: &mut XdrReader<'a>, limits: &Limits) -> Result<Option<SegmentArray<'a>>, V1Error> {
    if r.bool()? {
        Ok(Some(SegmentArray::decode(r, limits)?))
    } else {
        Ok(None)
    }
}

/// The three chunk lists of a decoded RDMA_MSG, RDMA_NOMSG or RDMA_MSGP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunks<'a> {
    /// The read list.
    pub reads: ReadList<'a>,
    /// The write list.
    pub writes: WriteList<'a>,
    /// The reply chunk, if present.
    pub reply: Option<SegmentArray<'a>>,
}

impl<'a> Chunks<'a> {
    /// No chunks at all.
    pub const EMPTY: Chunks<'static> = Chunks { reads: ReadList::EMPTY, writes: WriteList::EMPTY, reply: None };

    /// No list carries anything (most replies).
    #[inline]
    pub fn is_none(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// Decodes read list, write list and reply chunk, in that order.
    /// Inlined where it is called: most replies carry no chunk, which
    /// takes one test of three zero words, not a call.
    #[inline(always)]
    pub fn decode(r: &mut XdrReader<'a>, limits: &Limits) -> Result<Chunks<'a>, V1Error> {
        if r.rest().first_chunk::<EMPTY_CHUNK_LISTS_LEN>() == Some(&[0; EMPTY_CHUNK_LISTS_LEN]) {
            r.take(EMPTY_CHUNK_LISTS_LEN)?;
            return Ok(Chunks::EMPTY);
        }
        if let Some(c) = Self::decode_one_write_segment(r, limits) {
            return Ok(c);
        }
        Self::decode_lists(r, limits)
    }

    /// The lists of nearly every reply that is not all inline (the reply
    /// to a READ): no Read list, one Write chunk of one segment, no Reply
    /// chunk, recognised by their fixed words without walking the lists.
    /// Gives exactly what [`Chunks::decode_lists`] gives for them (a unit
    /// test checks it), or `None` (nothing consumed) for anything else.
    #[inline(always)]
    fn decode_one_write_segment(r: &mut XdrReader<'a>, limits: &Limits) -> Option<Chunks<'a>> {
        // Read list end; Write chunk present, one segment; the segment;
        // Write list end; no Reply chunk.
        const LEN: usize = 12 + SEGMENT_LEN + 8;
        let words = r.rest().first_chunk::<LEN>()?;
        let one_allowed =
            limits.max_write_chunks >= 1 && limits.max_chunk_segments >= 1 && limits.max_write_segments >= 1;
        if words[..12] != ONE_WRITE_SEGMENT_FIRST || words[12 + SEGMENT_LEN..] != [0; 8] || !one_allowed {
            return None;
        }
        let lists = r.take(LEN).ok()?;
        // The chunk as WriteList keeps it: present word, count, segment.
        let bytes = lists.get(4..12 + SEGMENT_LEN)?;
        Some(Chunks { reads: ReadList::EMPTY, writes: WriteList { bytes, chunks: 1, segments: 1 }, reply: None })
    }

    /// [`Chunks::decode`] of lists that are not all empty.
    #[inline(never)]
    fn decode_lists(r: &mut XdrReader<'a>, limits: &Limits) -> Result<Chunks<'a>, V1Error> {
        let reads = ReadList::decode(r, limits)?;
        let writes = WriteList::decode(r, limits)?;
        let reply = decode_reply_chunk(r, limits)?;
        Ok(Chunks { reads, writes, reply })
    }

    /// Encoded length of the three lists.
    pub fn encoded_len(&self) -> usize {
        let reply = match &self.reply {
            Some(a) => a.counted_len().saturating_add(4),
            None => 4,
        };
        self.reads.encoded_len().saturating_add(self.writes.encoded_len()).saturating_add(reply)
    }

    /// Re-encodes the three lists. Writes nothing if `w` lacks space.
    pub fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        let mut w = XdrWriter::new(w.reserve(self.encoded_len())?);
        self.reads.write(&mut w)?;
        self.writes.write(&mut w)?;
        match &self.reply {
            Some(a) => {
                w.put_u32(1)?;
                a.write_counted(&mut w)
            }
            None => Ok(w.put_u32(0)?),
        }
    }
}

/// Chunk lists to encode, given as slices of plain structs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLists<'s> {
    /// Read list entries, in order.
    pub reads: &'s [ReadSegment],
    /// Write chunks, each an array of segments.
    pub writes: &'s [&'s [Segment]],
    /// The reply chunk, if any.
    pub reply: Option<&'s [Segment]>,
}

impl ChunkLists<'_> {
    /// No chunks at all.
    pub const NONE: ChunkLists<'static> = ChunkLists { reads: &[], writes: &[], reply: None };

    /// No list carries anything (the header of most calls).
    #[inline]
    pub fn is_none(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// Encoded length of the three lists (saturating; an absurd shape simply
    /// never fits a buffer).
    #[inline]
    pub fn encoded_len(&self) -> usize {
        let write_segments = self.writes.iter().fold(0usize, |acc, c| acc.saturating_add(c.len()));
        chunk_lists_len(self.reads.len(), self.writes.len(), write_segments, self.reply.map(<[Segment]>::len))
    }

    /// Encodes the three lists. Writes nothing if `w` lacks space.
    pub fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        let mut words = Words::new(w.reserve(self.encoded_len())?);
        self.write(&mut words);
        Ok(words.finish()?)
    }

    /// Stores the three lists into `w`, which the caller sized with
    /// [`ChunkLists::encoded_len`] (a requester encodes these on every
    /// call: no check per word).
    #[inline(always)]
    fn write(&self, w: &mut Words<'_>) {
        for rs in self.reads {
            w.u32(1);
            w.u32(rs.position);
            put_segment(w, &rs.segment);
        }
        w.u32(0);
        for chunk in self.writes {
            w.u32(1);
            put_segments(w, chunk);
        }
        w.u32(0);
        match self.reply {
            Some(segs) => {
                w.u32(1);
                put_segments(w, segs);
            }
            None => w.u32(0),
        }
    }
}

#[inline(always)]
fn put_segment(w: &mut Words<'_>, s: &Segment) {
    w.u32(s.handle);
    w.u32(s.length);
    w.u64(s.offset);
}

#[inline(always)]
fn put_segments(w: &mut Words<'_>, segs: &[Segment]) {
    // A slice this long never passes the measurement, which saturates.
    w.u32(u32::try_from(segs.len()).unwrap_or(u32::MAX));
    for s in segs {
        put_segment(w, s);
    }
}

/// Body of an RDMA_ERROR header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBody {
    /// ERR_VERS: the sender supports versions `low..=high`.
    Vers {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// ERR_CHUNK: the header or chunk lists could not be parsed.
    Chunk,
}

impl ErrorBody {
    fn read(r: &mut XdrReader<'_>) -> Result<ErrorBody, V1Error> {
        match r.u32()? {
            ERR_VERS => Ok(ErrorBody::Vers { low: r.u32()?, high: r.u32()? }),
            ERR_CHUNK => Ok(ErrorBody::Chunk),
            code => Err(V1Error::BadErrorCode(code)),
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            ErrorBody::Vers { .. } => 12,
            ErrorBody::Chunk => 4,
        }
    }

    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), XdrError> {
        match *self {
            ErrorBody::Vers { low, high } => {
                w.put_u32(ERR_VERS)?;
                w.put_u32(low)?;
                w.put_u32(high)
            }
            ErrorBody::Chunk => w.put_u32(ERR_CHUNK),
        }
    }
}

/// The body of a header, by procedure.
///
/// `C` is [`Chunks`] for decoded headers and [`ChunkLists`] for headers to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<C> {
    /// RDMA_MSG: chunk lists, then the RPC message inline.
    Msg(C),
    /// RDMA_NOMSG: chunk lists only.
    NoMsg(C),
    /// RDMA_MSGP (RFC 5666): padding parameters, chunk lists, RPC message.
    Msgp {
        /// Alignment the receiver wants for padded opaque data.
        align: u32,
        /// Opaque length at or above which padding is applied.
        thresh: u32,
        /// The chunk lists.
        chunks: C,
    },
    /// RDMA_DONE (RFC 5666): no body.
    Done,
    /// RDMA_ERROR.
    Error(ErrorBody),
}

impl<C> Body<C> {
    /// The procedure of this body.
    pub fn procedure(&self) -> Proc {
        match self {
            Body::Msg(_) => Proc::Msg,
            Body::NoMsg(_) => Proc::NoMsg,
            Body::Msgp { .. } => Proc::Msgp,
            Body::Done => Proc::Done,
            Body::Error(_) => Proc::Error,
        }
    }

    /// The chunk lists, for the procedures that carry them.
    pub fn chunks(&self) -> Option<&C> {
        match self {
            Body::Msg(c) | Body::NoMsg(c) | Body::Msgp { chunks: c, .. } => Some(c),
            Body::Done | Body::Error(_) => None,
        }
    }
}

/// Chunk lists that can be encoded (both the decoded views and the slices).
trait EncodeChunks {
    fn len(&self) -> usize;
    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error>;
}

impl EncodeChunks for Chunks<'_> {
    fn len(&self) -> usize {
        self.encoded_len()
    }
    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        self.encode(w)
    }
}

impl EncodeChunks for ChunkLists<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.encoded_len()
    }
    fn put(&self, w: &mut XdrWriter<'_>) -> Result<(), V1Error> {
        self.encode(w)
    }
}

#[inline]
fn body_len<C: EncodeChunks>(body: &Body<C>) -> usize {
    let rest = match body {
        Body::Msg(c) | Body::NoMsg(c) => c.len(),
        Body::Msgp { chunks, .. } => chunks.len().saturating_add(MSGP_PAD_FIELDS_LEN),
        Body::Done => 0,
        Body::Error(e) => e.encoded_len(),
    };
    rest.saturating_add(FIXED_HEADER_LEN)
}

fn encode_body<C: EncodeChunks>(buf: &mut [u8], xid: u32, credits: u32, body: &Body<C>) -> Result<usize, V1Error> {
    let len = body_len(body);
    let out = buf.get_mut(..len).ok_or(NO_SPACE)?;
    let mut w = XdrWriter::new(out);
    w.put_u32(xid)?;
    w.put_u32(VERSION)?;
    w.put_u32(credits)?;
    w.put_u32(body.procedure().to_u32())?;
    match body {
        Body::Msg(c) | Body::NoMsg(c) => c.put(&mut w)?,
        Body::Msgp { align, thresh, chunks } => {
            w.put_u32(*align)?;
            w.put_u32(*thresh)?;
            chunks.put(&mut w)?;
        }
        Body::Done => {}
        Body::Error(e) => e.write(&mut w)?,
    }
    Ok(w.len())
}

/// A decoded version 1 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    /// Transaction ID.
    pub xid: u32,
    /// Credits requested or granted.
    pub credits: u32,
    /// Procedure-specific body.
    pub body: Body<Chunks<'a>>,
    /// Length of the header in bytes: where the RPC message starts for
    /// RDMA_MSG and RDMA_MSGP (for other procedures nothing should follow).
    pub header_len: usize,
}

impl<'a> Header<'a> {
    /// Decodes and validates a version 1 header from the start of `buf`.
    ///
    /// Fails with [`V1Error::VersionMismatch`] if the version is not 1 (after
    /// reading only the 16-byte prefix), with [`V1Error::BadProc`] or
    /// [`V1Error::BadErrorCode`] on unknown discriminants, with a limit error
    /// if a chunk list exceeds `limits`, and with [`V1Error::Xdr`] if the input
    /// is truncated or a "present" flag is neither 0 nor 1. Bytes after the
    /// header are not examined.
    #[inline(always)]
    pub fn decode(buf: &'a [u8], limits: &Limits) -> Result<Header<'a>, V1Error> {
        let mut r = XdrReader::new(buf);
        let p = Prefix::read(&mut r)?;
        if p.vers != VERSION {
            return Err(V1Error::VersionMismatch(p));
        }
        let body = match Proc::from_u32(p.procedure) {
            Some(Proc::Msg) => Body::Msg(Chunks::decode(&mut r, limits)?),
            Some(Proc::NoMsg) => Body::NoMsg(Chunks::decode(&mut r, limits)?),
            Some(Proc::Msgp) => {
                let align = r.u32()?;
                let thresh = r.u32()?;
                Body::Msgp { align, thresh, chunks: Chunks::decode(&mut r, limits)? }
            }
            Some(Proc::Done) => Body::Done,
            Some(Proc::Error) => Body::Error(ErrorBody::read(&mut r)?),
            None => return Err(V1Error::BadProc(p.procedure)),
        };
        Ok(Header { xid: p.xid, credits: p.credits, body, header_len: r.position() })
    }

    /// Like [`Header::decode`], also returning the bytes after the header
    /// (the inline RPC message for RDMA_MSG and RDMA_MSGP).
    #[inline]
    pub fn decode_split(buf: &'a [u8], limits: &Limits) -> Result<(Header<'a>, &'a [u8]), V1Error> {
        let h = Header::decode(buf, limits)?;
        let rest = buf.get(h.header_len..).unwrap_or(&[]);
        Ok((h, rest))
    }

    /// The procedure of this header.
    pub fn procedure(&self) -> Proc {
        self.body.procedure()
    }

    /// Encoded length of this header (equals `header_len` for a decoded header).
    pub fn encoded_len(&self) -> usize {
        body_len(&self.body)
    }

    /// Re-encodes this header into `buf`, returning the length written.
    /// Writes nothing if `buf` is too small.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, V1Error> {
        encode_body(buf, self.xid, self.credits, &self.body)
    }
}

/// Decodes an RDMA_ERROR header whatever its version field says.
///
/// The version in an error reply is not necessarily the one the requester
/// used, and the error arms share one layout across versions, so a requester
/// negotiating versions can read ERR_VERS with this. Fails with
/// [`V1Error::BadProc`] if the procedure is not RDMA_ERROR.
pub fn decode_error_any_version(buf: &[u8]) -> Result<(Prefix, ErrorBody), V1Error> {
    let mut r = XdrReader::new(buf);
    let p = Prefix::read(&mut r)?;
    if p.procedure != RDMA_ERROR {
        return Err(V1Error::BadProc(p.procedure));
    }
    Ok((p, ErrorBody::read(&mut r)?))
}

/// Encoded length of a header with `body`.
pub fn encoded_len(body: &Body<ChunkLists<'_>>) -> usize {
    body_len(body)
}

/// Stores the words given at the start of `buf` as XDR unsigned integers
/// and evaluates to `Ok(their length in bytes)`; if `buf` is too short,
/// writes nothing and evaluates to `Err(NO_SPACE)`.
///
/// Straight-line code into a buffer of constant length: every bounds test
/// folds away. (The kernel builds Rust at opt-level=s, which neither
/// unrolls a loop over the words nor inlines an iterator chain's
/// adaptors.)
macro_rules! put_words {
    ($buf:expr, [$($w:expr),+ $(,)?]) => {{
        const LEN: usize = 4 * [$(put_words!(@unit $w)),+].len();
        match $buf.first_chunk_mut::<LEN>() {
            Some(out) => {
                let mut w = Words::new(out);
                $(w.u32($w);)+
                w.finish().map(|()| LEN).map_err(V1Error::from)
            }
            None => Err(NO_SPACE),
        }
    }};
    (@unit $w:expr) => {
        ()
    };
}

/// Encodes a version 1 header into `buf` and returns its length. Writes
/// nothing if `buf` is too small (`V1Error::Xdr(XdrError::NoSpace)`).
/// Always inlined: the requester calls it once per RPC, and a call
/// builds and passes the body through memory.
#[inline(always)]
pub fn encode(buf: &mut [u8], xid: u32, credits: u32, body: &Body<ChunkLists<'_>>) -> Result<usize, V1Error> {
    match body {
        // A requester's every call.
        Body::Msg(c) | Body::NoMsg(c) => {
            let p = body.procedure().to_u32();
            // The three shapes nearly every call has (no chunk; one Write
            // chunk of one segment for a READ's payload; one Read segment
            // for a WRITE's) are fixed runs of words: stored after one
            // length test instead of one per word. Any other is measured,
            // then stored word by word.
            match *c {
                ChunkLists { reads: [], writes: [], reply: None } => {
                    return put_words!(buf, [xid, VERSION, credits, p, 0, 0, 0]);
                }
                ChunkLists { reads: [], writes: [[s]], reply: None } => {
                    return encode_one_write(buf, xid, credits, p == RDMA_NOMSG, s);
                }
                ChunkLists { reads: [rs], writes: [], reply: None } => {
                    return encode_one_read(buf, xid, credits, p == RDMA_NOMSG, rs);
                }
                _ => {}
            }
            let len = c.encoded_len().saturating_add(FIXED_HEADER_LEN);
            let mut w = Words::new(buf.get_mut(..len).ok_or(NO_SPACE)?);
            w.u32(xid);
            w.u32(VERSION);
            w.u32(credits);
            w.u32(p);
            c.write(&mut w);
            w.finish()?;
            Ok(len)
        }
        _ => encode_body(buf, xid, credits, body),
    }
}

/// Encodes the header of an RDMA_MSG (RDMA_NOMSG if `nomsg`) whose only
/// chunk is one Write chunk of the one segment `s` (a READ's call) into
/// `buf`; returns its length, as [`encode`] does for such lists (which it
/// encodes with this). For a caller that knows the shape without a
/// [`ChunkLists`] to match.
#[inline(always)]
pub fn encode_one_write(buf: &mut [u8], xid: u32, credits: u32, nomsg: bool, s: &Segment) -> Result<usize, V1Error> {
    let p = if nomsg { RDMA_NOMSG } else { RDMA_MSG };
    let (hi, lo) = split_u64(s.offset);
    put_words!(buf, [xid, VERSION, credits, p, 0, 1, 1, s.handle, s.length, hi, lo, 0, 0])
}

/// Encodes the header of an RDMA_MSG (RDMA_NOMSG if `nomsg`) whose only
/// chunk is the one Read segment `rs` (a WRITE's call) into `buf`; returns
/// its length, as [`encode`] does for such lists (which it encodes with
/// this).
#[inline(always)]
pub fn encode_one_read(
    buf: &mut [u8],
    xid: u32,
    credits: u32,
    nomsg: bool,
    rs: &ReadSegment,
) -> Result<usize, V1Error> {
    let p = if nomsg { RDMA_NOMSG } else { RDMA_MSG };
    let s = &rs.segment;
    let (hi, lo) = split_u64(s.offset);
    put_words!(buf, [xid, VERSION, credits, p, 1, rs.position, s.handle, s.length, hi, lo, 0, 0, 0])
}

/// The two XDR words of a hyper integer, most significant first.
#[inline(always)]
fn split_u64(v: u64) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = v.to_be_bytes();
    (u32::from_be_bytes([a, b, c, d]), u32::from_be_bytes([e, f, g, h]))
}

/// Encodes an RDMA_MSG header (the RPC message is appended by the caller).
pub fn encode_msg(buf: &mut [u8], xid: u32, credits: u32, chunks: &ChunkLists<'_>) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::Msg(*chunks))
}

/// Encodes an RDMA_NOMSG header.
pub fn encode_nomsg(buf: &mut [u8], xid: u32, credits: u32, chunks: &ChunkLists<'_>) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::NoMsg(*chunks))
}

/// Encodes an RDMA_MSGP header (RFC 5666).
pub fn encode_msgp(
    buf: &mut [u8],
    xid: u32,
    credits: u32,
    align: u32,
    thresh: u32,
    chunks: &ChunkLists<'_>,
) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::Msgp { align, thresh, chunks: *chunks })
}

/// Encodes an RDMA_DONE header (RFC 5666); always [`DONE_HEADER_LEN`] bytes.
pub fn encode_done(buf: &mut [u8], xid: u32, credits: u32) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::Done)
}

/// Encodes an RDMA_ERROR/ERR_VERS header advertising versions `low..=high`.
pub fn encode_err_vers(buf: &mut [u8], xid: u32, credits: u32, low: u32, high: u32) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::Error(ErrorBody::Vers { low, high }))
}

/// Encodes an RDMA_ERROR/ERR_VERS header like [`encode_err_vers`], but with
/// `vers` in the version field. ERR_VERS has the same layout in every
/// protocol version, so this also answers (or mimics) a header of another
/// version; always [`ERR_VERS_HEADER_LEN`] bytes.
pub fn encode_err_vers_any_version(
    buf: &mut [u8],
    xid: u32,
    vers: u32,
    credits: u32,
    low: u32,
    high: u32,
) -> Result<usize, V1Error> {
    let out = buf.get_mut(..ERR_VERS_HEADER_LEN).ok_or(NO_SPACE)?;
    let mut w = XdrWriter::new(out);
    Prefix { xid, vers, credits, procedure: RDMA_ERROR }.write(&mut w)?;
    ErrorBody::Vers { low, high }.write(&mut w)?;
    Ok(w.len())
}

/// Encodes an RDMA_ERROR/ERR_CHUNK header.
pub fn encode_err_chunk(buf: &mut [u8], xid: u32, credits: u32) -> Result<usize, V1Error> {
    encode(buf, xid, credits, &Body::Error(ErrorBody::Chunk))
}

/// Encoded length of a read list with `segments` entries.
pub const fn read_list_len(segments: usize) -> usize {
    segments.saturating_mul(READ_LIST_ENTRY_LEN).saturating_add(4)
}

/// Encoded length of a write list with `chunks` chunks holding `segments`
/// segments in all.
pub const fn write_list_len(chunks: usize, segments: usize) -> usize {
    chunks.saturating_mul(8).saturating_add(segments.saturating_mul(SEGMENT_LEN)).saturating_add(4)
}

/// Encoded length of a reply chunk: absent, or present with `n` segments.
pub const fn reply_chunk_len(segments: Option<usize>) -> usize {
    match segments {
        Some(n) => n.saturating_mul(SEGMENT_LEN).saturating_add(8),
        None => 4,
    }
}

/// Encoded length of the three chunk lists of the given shape.
pub const fn chunk_lists_len(
    read_segments: usize,
    write_chunks: usize,
    write_segments: usize,
    reply_segments: Option<usize>,
) -> usize {
    read_list_len(read_segments)
        .saturating_add(write_list_len(write_chunks, write_segments))
        .saturating_add(reply_chunk_len(reply_segments))
}

/// Encoded length of an RDMA_MSG or RDMA_NOMSG header of the given shape
/// (add [`MSGP_PAD_FIELDS_LEN`] for RDMA_MSGP). Useful for inline threshold
/// arithmetic: the RPC message may use `threshold - msg_header_len(..)` bytes.
pub const fn msg_header_len(
    read_segments: usize,
    write_chunks: usize,
    write_segments: usize,
    reply_segments: Option<usize>,
) -> usize {
    chunk_lists_len(read_segments, write_chunks, write_segments, reply_segments).saturating_add(FIXED_HEADER_LEN)
}

/// Rounds a length up to the next multiple of four (XDR roundup), e.g. for a
/// write chunk length; `None` if the result does not fit in 32 bits.
pub const fn xdr_round_up(len: u32) -> Option<u32> {
    match len.checked_add(3) {
        Some(v) => Some(v & !3),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::testutil::Rng;
    use super::*;
    use std::format;
    use std::vec;
    use std::vec::Vec;

    // ---- Hand-written vectors (from the XDR in RFC 5666 section 4.3 / RFC 8166) ----

    /// RDMA_MSG with no chunks, then an 8-byte RPC message.
    const MSG_PLAIN: [u8; 36] = [
        0x00, 0x00, 0x00, 0x01, // xid
        0x00, 0x00, 0x00, 0x01, // vers = 1
        0x00, 0x00, 0x00, 0x10, // credits = 16
        0x00, 0x00, 0x00, 0x00, // proc = RDMA_MSG
        0x00, 0x00, 0x00, 0x00, // read list: empty
        0x00, 0x00, 0x00, 0x00, // write list: empty
        0x00, 0x00, 0x00, 0x00, // reply chunk: absent
        0x00, 0x00, 0x00, 0x01, // payload: RPC xid
        0x00, 0x00, 0x00, 0x00, // payload: CALL
    ];

    /// RDMA_MSG with a two-segment read chunk at position 0x40, one write chunk
    /// of two segments, no reply chunk, then an 8-byte RPC message.
    const MSG_CHUNKS: [u8; 124] = [
        0x11, 0x22, 0x33, 0x44, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x80, // credits = 128
        0x00, 0x00, 0x00, 0x00, // proc = RDMA_MSG
        0x00, 0x00, 0x00, 0x01, // read list: present
        0x00, 0x00, 0x00, 0x40, //   position
        0x00, 0x00, 0xa0, 0x01, //   handle
        0x00, 0x00, 0x20, 0x00, //   length = 8192
        0x00, 0x00, 0x00, 0x01, //   offset (hi)
        0x00, 0x00, 0x20, 0x00, //   offset (lo)
        0x00, 0x00, 0x00, 0x01, // read list: present
        0x00, 0x00, 0x00, 0x40, //   position
        0x00, 0x00, 0xa0, 0x02, //   handle
        0x00, 0x00, 0x08, 0x00, //   length = 2048
        0x00, 0x00, 0x00, 0x01, //   offset (hi)
        0x80, 0x00, 0x00, 0x00, //   offset (lo)
        0x00, 0x00, 0x00, 0x00, // read list: end
        0x00, 0x00, 0x00, 0x01, // write list: present
        0x00, 0x00, 0x00, 0x02, //   segment count
        0x00, 0x00, 0xb0, 0x01, //   handle
        0x00, 0x00, 0x10, 0x00, //   length = 4096
        0x00, 0x00, 0x00, 0x00, //   offset (hi)
        0x0b, 0xad, 0xf0, 0x00, //   offset (lo)
        0x00, 0x00, 0xb0, 0x02, //   handle
        0x00, 0x00, 0x00, 0x04, //   length = 4
        0xff, 0xff, 0xff, 0xff, //   offset (hi)
        0xff, 0xff, 0xff, 0xfc, //   offset (lo)
        0x00, 0x00, 0x00, 0x00, // write list: end
        0x00, 0x00, 0x00, 0x00, // reply chunk: absent
        0x11, 0x22, 0x33, 0x44, // payload: RPC xid
        0x00, 0x00, 0x00, 0x00, // payload: CALL
    ];
    const MSG_CHUNKS_HDR_LEN: usize = 116;

    /// RDMA_NOMSG: a long call as a position-zero read chunk, plus a reply chunk.
    const NOMSG_LONG: [u8; 72] = [
        0xca, 0xfe, 0xf0, 0x0d, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x01, // credits = 1
        0x00, 0x00, 0x00, 0x01, // proc = RDMA_NOMSG
        0x00, 0x00, 0x00, 0x01, // read list: present
        0x00, 0x00, 0x00, 0x00, //   position = 0
        0x12, 0x34, 0x56, 0x78, //   handle
        0x00, 0x01, 0x00, 0x00, //   length = 65536
        0x00, 0x00, 0x7f, 0x00, //   offset (hi)
        0x00, 0x00, 0x10, 0x00, //   offset (lo)
        0x00, 0x00, 0x00, 0x00, // read list: end
        0x00, 0x00, 0x00, 0x00, // write list: empty
        0x00, 0x00, 0x00, 0x01, // reply chunk: present
        0x00, 0x00, 0x00, 0x01, //   segment count
        0x9a, 0xbc, 0xde, 0xf0, //   handle
        0x00, 0x00, 0x80, 0x00, //   length = 32768
        0x00, 0x00, 0x7f, 0x00, //   offset (hi)
        0x00, 0x10, 0x00, 0x00, //   offset (lo)
    ];

    /// RDMA_MSGP (RFC 5666): align 4096, thresh 1024, one write chunk of one
    /// segment, then a 4-byte RPC message fragment.
    const MSGP: [u8; 64] = [
        0x0a, 0x0b, 0x0c, 0x0d, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x04, // credits
        0x00, 0x00, 0x00, 0x02, // proc = RDMA_MSGP
        0x00, 0x00, 0x10, 0x00, // align = 4096
        0x00, 0x00, 0x04, 0x00, // thresh = 1024
        0x00, 0x00, 0x00, 0x00, // read list: empty
        0x00, 0x00, 0x00, 0x01, // write list: present
        0x00, 0x00, 0x00, 0x01, //   segment count
        0x00, 0x00, 0x00, 0x07, //   handle
        0x00, 0x00, 0x01, 0x00, //   length = 256
        0x00, 0x00, 0x00, 0x00, //   offset (hi)
        0x00, 0x00, 0x00, 0x10, //   offset (lo)
        0x00, 0x00, 0x00, 0x00, // write list: end
        0x00, 0x00, 0x00, 0x00, // reply chunk: absent
        0x0a, 0x0b, 0x0c, 0x0d, // payload
    ];
    const MSGP_HDR_LEN: usize = 60;

    /// RDMA_DONE (RFC 5666): the body is void.
    const DONE: [u8; 16] = [
        0x0a, 0x0b, 0x0c, 0x0d, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x04, // credits
        0x00, 0x00, 0x00, 0x03, // proc = RDMA_DONE
    ];

    /// RDMA_ERROR / ERR_VERS supporting versions 1..=2.
    const ERR_VERS_V: [u8; 28] = [
        0x11, 0x22, 0x33, 0x44, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x20, // credits = 32
        0x00, 0x00, 0x00, 0x04, // proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x01, // err = ERR_VERS
        0x00, 0x00, 0x00, 0x01, // low
        0x00, 0x00, 0x00, 0x02, // high
    ];

    /// RDMA_ERROR / ERR_CHUNK.
    const ERR_CHUNK_V: [u8; 20] = [
        0x11, 0x22, 0x33, 0x44, // xid
        0x00, 0x00, 0x00, 0x01, // vers
        0x00, 0x00, 0x00, 0x20, // credits
        0x00, 0x00, 0x00, 0x04, // proc = RDMA_ERROR
        0x00, 0x00, 0x00, 0x02, // err = ERR_CHUNK
    ];

    /// Every vector with its header length.
    const VECTORS: [(&[u8], usize); 7] = [
        (&MSG_PLAIN, MIN_MSG_HEADER_LEN),
        (&MSG_CHUNKS, MSG_CHUNKS_HDR_LEN),
        (&NOMSG_LONG, 72),
        (&MSGP, MSGP_HDR_LEN),
        (&DONE, DONE_HEADER_LEN),
        (&ERR_VERS_V, ERR_VERS_HEADER_LEN),
        (&ERR_CHUNK_V, ERR_CHUNK_HEADER_LEN),
    ];

    const READS: [ReadSegment; 2] = [
        ReadSegment { position: 0x40, segment: Segment { handle: 0xa001, length: 8192, offset: 0x1_0000_2000 } },
        ReadSegment { position: 0x40, segment: Segment { handle: 0xa002, length: 2048, offset: 0x1_8000_0000 } },
    ];
    const WRITE0: [Segment; 2] = [
        Segment { handle: 0xb001, length: 4096, offset: 0x0bad_f000 },
        Segment { handle: 0xb002, length: 4, offset: 0xffff_ffff_ffff_fffc },
    ];
    const LONG_CALL: [ReadSegment; 1] =
        [ReadSegment { position: 0, segment: Segment { handle: 0x1234_5678, length: 65536, offset: 0x7f00_0000_1000 } }];
    const REPLY: [Segment; 1] = [Segment { handle: 0x9abc_def0, length: 32768, offset: 0x7f00_0010_0000 }];
    const MSGP_WRITE: [Segment; 1] = [Segment { handle: 7, length: 256, offset: 0x10 }];

    fn dec(buf: &[u8]) -> Result<Header<'_>, V1Error> {
        Header::decode(buf, &Limits::DEFAULT)
    }

    fn enc(body: &Body<ChunkLists<'_>>, xid: u32, credits: u32) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = encode(&mut buf, xid, credits, body).unwrap();
        assert_eq!(n, encoded_len(body));
        buf.truncate(n);
        buf
    }

    fn chunks_of<'a>(h: &Header<'a>) -> Chunks<'a> {
        *h.body.chunks().expect("procedure carries chunks")
    }

    // ---- Vector decode / encode ----

    #[test]
    fn msg_plain_vector() {
        let (h, payload) = Header::decode_split(&MSG_PLAIN, &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.credits, h.procedure(), h.header_len), (1, 16, Proc::Msg, 28));
        assert_eq!(h.body, Body::Msg(Chunks::EMPTY));
        assert_eq!(payload, &[0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(enc(&Body::Msg(ChunkLists::NONE), 1, 16), &MSG_PLAIN[..28]);
        let mut buf = [0u8; 28];
        assert_eq!(encode_msg(&mut buf, 1, 16, &ChunkLists::NONE), Ok(28));
        assert_eq!(buf, MSG_PLAIN[..28]);
        assert_eq!(msg_header_len(0, 0, 0, None), MIN_MSG_HEADER_LEN);
    }

    /// The shortcuts for chunk-less headers (encode and decode) give what
    /// the general code gives, and fail where it fails.
    #[test]
    fn chunkless_shortcuts_agree_with_the_general_code() {
        for body in [Body::Msg(ChunkLists::NONE), Body::NoMsg(ChunkLists::NONE)] {
            let mut fast = [0xeeu8; 40];
            let mut slow = [0xeeu8; 40];
            assert_eq!(encode(&mut fast, 0xdead_beef, 128, &body), Ok(MIN_MSG_HEADER_LEN));
            assert_eq!(encode_body(&mut slow, 0xdead_beef, 128, &body), Ok(MIN_MSG_HEADER_LEN));
            assert_eq!(fast, slow);
            // One byte short: an error, and nothing written.
            let mut short = [0xeeu8; MIN_MSG_HEADER_LEN - 1];
            assert_eq!(encode(&mut short, 1, 1, &body), Err(NO_SPACE));
            assert_eq!(short, [0xeeu8; MIN_MSG_HEADER_LEN - 1]);
            let h = dec(&fast).unwrap();
            assert_eq!(chunks_of(&h), Chunks::EMPTY);
            assert!(chunks_of(&h).is_none());
            assert_eq!(h.header_len, MIN_MSG_HEADER_LEN);
        }
        // Empty lists cut short, or a bad "present" flag, still fail.
        let mut bad = MSG_PLAIN;
        for cut in FIXED_HEADER_LEN..MIN_MSG_HEADER_LEN {
            assert!(matches!(dec(&bad[..cut]), Err(V1Error::Xdr(XdrError::Truncated { .. }))), "cut at {cut}");
        }
        bad[FIXED_HEADER_LEN + 3] = 2;
        assert_eq!(dec(&bad), Err(V1Error::Xdr(XdrError::BadBool(2))));
        // A present reply chunk after two empty lists takes the general path.
        let body = Body::Msg(ChunkLists { reads: &[], writes: &[], reply: Some(&REPLY) });
        let wire = enc(&body, 5, 6);
        assert_eq!(chunks_of(&dec(&wire).unwrap()).reply.map(|a| a.len()), Some(1));
        assert!(!chunks_of(&dec(&wire).unwrap()).is_none());
        // Any one list not empty: chunks there are.
        let c = chunks_of(&dec(&MSG_CHUNKS).unwrap());
        assert!(!c.is_none());
        assert!(!Chunks { reads: c.reads, ..Chunks::EMPTY }.is_none());
        assert!(!Chunks { writes: c.writes, ..Chunks::EMPTY }.is_none());
    }

    /// The fixed-shape encodings (no chunk, one Write segment, one Read
    /// segment) store what the general encoder stores, and fail where it
    /// fails, writing nothing; shapes next to them take the general path.
    #[test]
    fn fixed_shape_encodings_agree_with_the_general_code() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut fixed = 0;
        for _ in 0..50_000 {
            let seg = |rng: &mut Rng| Segment { handle: rng.low_u32(), length: rng.low_u32(), offset: rng.next() };
            let reads: Vec<ReadSegment> =
                (0..rng.below(3)).map(|_| ReadSegment { position: rng.low_u32(), segment: seg(&mut rng) }).collect();
            let chunks: Vec<Vec<Segment>> =
                (0..rng.below(3)).map(|_| (0..rng.below(3)).map(|_| seg(&mut rng)).collect()).collect();
            let writes: Vec<&[Segment]> = chunks.iter().map(Vec::as_slice).collect();
            let reply_segs: Vec<Segment> = (0..rng.below(3)).map(|_| seg(&mut rng)).collect();
            let reply = (rng.below(3) == 0).then_some(reply_segs.as_slice());
            let lists = ChunkLists { reads: &reads, writes: &writes, reply };
            let body = if rng.below(2) == 0 { Body::Msg(lists) } else { Body::NoMsg(lists) };
            let need = encoded_len(&body);
            // Room to spare, exactly enough, or short by a little.
            let room = match rng.below(3) {
                0 => need + rng.below(16) as usize,
                1 => need,
                _ => need.saturating_sub(1 + rng.below(8) as usize),
            };
            let (xid, credits) = (rng.low_u32(), rng.low_u32());
            let mut fast = vec![0xa5u8; room];
            let mut slow = vec![0xa5u8; room];
            let got = encode(&mut fast, xid, credits, &body);
            assert_eq!(got, encode_body(&mut slow, xid, credits, &body), "{body:?} in {room} bytes");
            assert_eq!(fast, slow, "{body:?} in {room} bytes");
            if got.is_ok() {
                assert_eq!(dec(&fast[..need]).map(|h| h.xid), Ok(xid));
            }
            let one_write = writes.len() == 1 && writes[0].len() == 1;
            // The shapes' own encoders, which a caller that knows the shape
            // calls directly, say the same.
            let nomsg = matches!(body, Body::NoMsg(_));
            let mut direct = vec![0xa5u8; room];
            let direct_got = match (reads.as_slice(), writes.as_slice(), reply) {
                ([rs], [], None) => Some(encode_one_read(&mut direct, xid, credits, nomsg, rs)),
                ([], [[s]], None) => Some(encode_one_write(&mut direct, xid, credits, nomsg, s)),
                _ => None,
            };
            if let Some(direct_got) = direct_got {
                assert_eq!(direct_got, got, "{body:?} in {room} bytes");
                assert_eq!(direct, fast, "{body:?} in {room} bytes");
            }
            if reply.is_none()
                && (reads.is_empty() && (writes.is_empty() || one_write) || reads.len() == 1 && writes.is_empty())
            {
                fixed += 1;
            }
        }
        // The fixed shapes were among those tried.
        assert!(fixed > 1000, "{fixed}");
    }

    #[test]
    fn msg_chunks_vector() {
        let (h, payload) = Header::decode_split(&MSG_CHUNKS, &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.credits, h.procedure(), h.header_len), (0x1122_3344, 128, Proc::Msg, 116));
        assert_eq!(payload, &[0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0]);
        let c = chunks_of(&h);
        assert_eq!(c.reads.len(), 2);
        assert!(!c.reads.is_empty());
        assert_eq!(c.reads.iter().collect::<Vec<_>>(), READS);
        assert_eq!(c.reads.get(0), Some(READS[0]));
        assert_eq!(c.reads.get(1), Some(READS[1]));
        assert_eq!(c.reads.get(2), None);
        assert_eq!(c.reads.get(usize::MAX), None);
        assert_eq!(c.reads.total_length(), 10240);
        let rc: Vec<_> = c.reads.chunks().collect();
        assert_eq!(rc.len(), 1);
        assert_eq!(rc[0].position, 0x40);
        assert_eq!(rc[0].segments, c.reads);
        assert_eq!(c.writes.len(), 1);
        assert_eq!(c.writes.segment_count(), 2);
        let w0 = c.writes.get(0).unwrap();
        assert_eq!(c.writes.get(1), None);
        assert_eq!(w0.len(), 2);
        assert_eq!(w0.iter().collect::<Vec<_>>(), WRITE0);
        assert_eq!(w0.get(1), Some(WRITE0[1]));
        assert_eq!(w0.get(2), None);
        assert_eq!(w0.total_length(), 4100);
        assert_eq!(w0.as_bytes(), &MSG_CHUNKS[76..108]);
        assert_eq!(c.reply, None);

        let lists = ChunkLists { reads: &READS, writes: &[&WRITE0], reply: None };
        assert_eq!(lists.encoded_len(), 116 - 16);
        assert_eq!(msg_header_len(2, 1, 2, None), 116);
        assert_eq!(enc(&Body::Msg(lists), 0x1122_3344, 128), &MSG_CHUNKS[..116]);
        let mut buf = [0u8; 116];
        assert_eq!(h.encode(&mut buf), Ok(116));
        assert_eq!(buf, MSG_CHUNKS[..116]);
        assert_eq!(h.encoded_len(), 116);
    }

    #[test]
    fn nomsg_vector() {
        let (h, payload) = Header::decode_split(&NOMSG_LONG, &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.credits, h.procedure(), h.header_len), (0xcafe_f00d, 1, Proc::NoMsg, 72));
        assert!(payload.is_empty());
        let c = chunks_of(&h);
        assert_eq!(c.reads.iter().collect::<Vec<_>>(), LONG_CALL);
        assert!(c.writes.is_empty());
        assert_eq!(c.writes.iter().count(), 0);
        let reply = c.reply.unwrap();
        assert_eq!(reply.iter().collect::<Vec<_>>(), REPLY);
        let lists = ChunkLists { reads: &LONG_CALL, writes: &[], reply: Some(&REPLY) };
        assert_eq!(msg_header_len(1, 0, 0, Some(1)), 72);
        assert_eq!(enc(&Body::NoMsg(lists), 0xcafe_f00d, 1), NOMSG_LONG);
        let mut buf = [0u8; 72];
        assert_eq!(encode_nomsg(&mut buf, 0xcafe_f00d, 1, &lists), Ok(72));
        assert_eq!(buf, NOMSG_LONG);
    }

    #[test]
    fn msgp_vector() {
        let (h, payload) = Header::decode_split(&MSGP, &Limits::DEFAULT).unwrap();
        assert_eq!((h.xid, h.credits, h.procedure(), h.header_len), (0x0a0b_0c0d, 4, Proc::Msgp, 60));
        assert_eq!(payload, &[0x0a, 0x0b, 0x0c, 0x0d]);
        let Body::Msgp { align, thresh, chunks } = h.body else { panic!("not msgp") };
        assert_eq!((align, thresh), (4096, 1024));
        assert!(chunks.reads.is_empty());
        assert_eq!(chunks.writes.iter().map(|a| a.iter().collect::<Vec<_>>()).collect::<Vec<_>>(), [MSGP_WRITE]);
        assert_eq!(chunks.reply, None);
        let lists = ChunkLists { reads: &[], writes: &[&MSGP_WRITE], reply: None };
        let mut buf = [0u8; 60];
        assert_eq!(encode_msgp(&mut buf, 0x0a0b_0c0d, 4, 4096, 1024, &lists), Ok(60));
        assert_eq!(buf, MSGP[..60]);
        assert_eq!(msg_header_len(0, 1, 1, None) + MSGP_PAD_FIELDS_LEN, 60);
        assert_eq!(MIN_MSGP_HEADER_LEN, 36);
    }

    #[test]
    fn done_vector() {
        let h = dec(&DONE).unwrap();
        assert_eq!((h.xid, h.credits, h.body, h.header_len), (0x0a0b_0c0d, 4, Body::Done, 16));
        assert_eq!(h.body.chunks(), None);
        let mut buf = [0xffu8; 16];
        assert_eq!(encode_done(&mut buf, 0x0a0b_0c0d, 4), Ok(16));
        assert_eq!(buf, DONE);
    }

    #[test]
    fn error_vectors() {
        let h = dec(&ERR_VERS_V).unwrap();
        assert_eq!((h.xid, h.credits, h.header_len), (0x1122_3344, 32, 28));
        assert_eq!(h.body, Body::Error(ErrorBody::Vers { low: 1, high: 2 }));
        let mut buf = [0u8; 28];
        assert_eq!(encode_err_vers(&mut buf, 0x1122_3344, 32, 1, 2), Ok(28));
        assert_eq!(buf, ERR_VERS_V);

        let h = dec(&ERR_CHUNK_V).unwrap();
        assert_eq!((h.xid, h.credits, h.header_len), (0x1122_3344, 32, 20));
        assert_eq!(h.body, Body::Error(ErrorBody::Chunk));
        let mut buf = [0u8; 20];
        assert_eq!(encode_err_chunk(&mut buf, 0x1122_3344, 32), Ok(20));
        assert_eq!(buf, ERR_CHUNK_V);
    }

    #[test]
    fn peek_prefix_of_any_version() {
        let p = peek(&MSG_CHUNKS).unwrap();
        assert_eq!(p, Prefix { xid: 0x1122_3344, vers: 1, credits: 128, procedure: 0 });
        let mut v7 = DONE;
        v7[7] = 7;
        v7[15] = 99;
        assert_eq!(peek(&v7), Ok(Prefix { xid: 0x0a0b_0c0d, vers: 7, credits: 4, procedure: 99 }));
        assert_eq!(peek(&DONE[..15]), Err(V1Error::Xdr(XdrError::Truncated { at: 12, need: 4 })));
    }

    #[test]
    fn proc_numbers() {
        for v in 0..5 {
            assert_eq!(Proc::from_u32(v).map(Proc::to_u32), Some(v));
        }
        assert_eq!(Proc::from_u32(5), None);
        assert_eq!(Proc::from_u32(u32::MAX), None);
    }

    // ---- Truncation ----

    #[test]
    fn truncation_at_every_offset_fails() {
        for (v, hdr_len) in VECTORS {
            for cut in 0..hdr_len {
                match dec(&v[..cut]) {
                    Err(V1Error::Xdr(XdrError::Truncated { at, need })) => {
                        assert!(at <= cut && at + need > cut, "cut {cut}: at {at} need {need}")
                    }
                    other => panic!("cut {cut} of {hdr_len}: {other:?}"),
                }
            }
            // The payload is not the header's business.
            let full = dec(v).unwrap();
            for cut in hdr_len..=v.len() {
                assert_eq!(dec(&v[..cut]), Ok(full));
            }
        }
    }

    #[test]
    fn encoding_into_short_buffers_fails_without_writing() {
        for (v, hdr_len) in VECTORS {
            let h = dec(v).unwrap();
            for len in 0..hdr_len {
                let mut buf = vec![0x5au8; len];
                assert_eq!(h.encode(&mut buf), Err(V1Error::Xdr(XdrError::NoSpace)));
                assert!(buf.iter().all(|&b| b == 0x5a));
            }
        }
        let lists = ChunkLists { reads: &READS, writes: &[&WRITE0], reply: Some(&REPLY) };
        let need = encoded_len(&Body::NoMsg(lists));
        for len in 0..need {
            let mut buf = vec![0x5au8; len];
            assert_eq!(encode_nomsg(&mut buf, 1, 1, &lists), Err(V1Error::Xdr(XdrError::NoSpace)));
            assert!(buf.iter().all(|&b| b == 0x5a));
        }
        // Writers used piecewise are atomic too.
        let mut small = [0u8; 20];
        let mut w = XdrWriter::new(&mut small);
        assert_eq!(lists.encode(&mut w), Err(V1Error::Xdr(XdrError::NoSpace)));
        assert!(w.is_empty());
    }

    // ---- Bad input ----

    fn set_word(v: &mut [u8], off: usize, val: u32) {
        v[off..off + 4].copy_from_slice(&val.to_be_bytes());
    }

    #[test]
    fn wrong_version_is_typed() {
        for vers in [0u32, 2, 0xffff_ffff] {
            for (v, _) in VECTORS {
                let mut m = v.to_vec();
                set_word(&mut m, 4, vers);
                let p = peek(&m).unwrap();
                assert_eq!(p.vers, vers);
                assert_eq!(dec(&m), Err(V1Error::VersionMismatch(p)));
            }
        }
        // Even a prefix with no body at all reports the version.
        let mut m = DONE;
        set_word(&mut m, 4, 2);
        set_word(&mut m, 12, 0);
        assert!(matches!(dec(&m), Err(V1Error::VersionMismatch(Prefix { vers: 2, .. }))));
    }

    #[test]
    fn error_readable_whatever_the_version() {
        let mut m = ERR_VERS_V;
        set_word(&mut m, 4, 2);
        let (p, e) = decode_error_any_version(&m).unwrap();
        assert_eq!((p.xid, p.vers, e), (0x1122_3344, 2, ErrorBody::Vers { low: 1, high: 2 }));
        assert_eq!(decode_error_any_version(&ERR_CHUNK_V).map(|x| x.1), Ok(ErrorBody::Chunk));
        assert_eq!(decode_error_any_version(&DONE), Err(V1Error::BadProc(RDMA_DONE)));
        assert!(decode_error_any_version(&ERR_VERS_V[..27]).is_err());
        let mut bad = ERR_CHUNK_V;
        set_word(&mut bad, 16, 3);
        assert_eq!(decode_error_any_version(&bad), Err(V1Error::BadErrorCode(3)));
    }

    #[test]
    fn err_vers_with_any_version_field() {
        let (mut a, mut b) = ([0u8; ERR_VERS_HEADER_LEN], [0u8; ERR_VERS_HEADER_LEN]);
        assert_eq!(encode_err_vers(&mut a, 0x1122_3344, 5, 1, 2), Ok(ERR_VERS_HEADER_LEN));
        assert_eq!(encode_err_vers_any_version(&mut b, 0x1122_3344, VERSION, 5, 1, 2), Ok(ERR_VERS_HEADER_LEN));
        assert_eq!(a, b);
        assert_eq!(encode_err_vers_any_version(&mut b, 0x1122_3344, 2, 5, 1, 2), Ok(ERR_VERS_HEADER_LEN));
        let p = Prefix { xid: 0x1122_3344, vers: 2, credits: 5, procedure: RDMA_ERROR };
        assert_eq!(decode_error_any_version(&b), Ok((p, ErrorBody::Vers { low: 1, high: 2 })));
        let mut c = [0x5au8; ERR_VERS_HEADER_LEN];
        assert_eq!(encode_err_vers_any_version(&mut c[..27], 1, 2, 3, 4, 5), Err(NO_SPACE));
        assert!(c.iter().all(|&x| x == 0x5a));
    }

    #[test]
    fn bad_proc_and_error_code() {
        for p in [5u32, 6, 0x100, u32::MAX] {
            let mut m = MSG_PLAIN;
            set_word(&mut m, 12, p);
            assert_eq!(dec(&m), Err(V1Error::BadProc(p)));
        }
        for code in [0u32, 3, 0x8000_0000, u32::MAX] {
            let mut m = ERR_VERS_V;
            set_word(&mut m, 16, code);
            assert_eq!(dec(&m), Err(V1Error::BadErrorCode(code)));
        }
    }

    #[test]
    fn present_flags_must_be_boolean() {
        // Offsets of every "present"/terminator word in MSG_CHUNKS and NOMSG_LONG.
        for (v, offsets) in [(&MSG_CHUNKS[..], &[16usize, 40, 64, 68, 108, 112][..]), (&NOMSG_LONG[..], &[16, 40, 44, 48])] {
            for &off in offsets {
                for val in [2u32, 0xffff_ffff, 0x0100_0000] {
                    let mut m = v.to_vec();
                    set_word(&mut m, off, val);
                    assert_eq!(dec(&m), Err(V1Error::Xdr(XdrError::BadBool(val))), "offset {off}");
                }
            }
        }
    }

    #[test]
    fn huge_counts_fail_fast() {
        // Write chunk segment count 0xffffffff (MSG_CHUNKS offset 72).
        let mut m = MSG_CHUNKS.to_vec();
        set_word(&mut m, 72, u32::MAX);
        assert_eq!(dec(&m), Err(V1Error::TooManyChunkSegments { count: u32::MAX, max: 256 }));
        assert!(matches!(
            Header::decode(&m, &Limits::UNBOUNDED),
            Err(V1Error::Xdr(XdrError::Truncated { at: 76, .. }))
        ));
        // Reply chunk count 0xffffffff (NOMSG_LONG offset 52).
        let mut m = NOMSG_LONG.to_vec();
        set_word(&mut m, 52, u32::MAX);
        assert_eq!(dec(&m), Err(V1Error::TooManyChunkSegments { count: u32::MAX, max: 256 }));
        assert!(matches!(
            Header::decode(&m, &Limits::UNBOUNDED),
            Err(V1Error::Xdr(XdrError::Truncated { at: 56, .. }))
        ));
        // A count one larger than what is present.
        let mut m = NOMSG_LONG.to_vec();
        set_word(&mut m, 52, 2);
        assert!(matches!(dec(&m), Err(V1Error::Xdr(XdrError::Truncated { at: 56, need: 32 }))));
    }

    /// Builds a MSG header with `reads` read entries, `writes` write chunks of
    /// `per_chunk` segments, and a reply chunk of `reply` segments.
    fn shape(reads: usize, writes: usize, per_chunk: usize, reply: Option<usize>) -> Vec<u8> {
        let rs = vec![READS[0]; reads];
        let segs = vec![WRITE0[0]; per_chunk.max(reply.unwrap_or(0))];
        let chunks: Vec<&[Segment]> = (0..writes).map(|_| &segs[..per_chunk]).collect();
        let lists = ChunkLists { reads: &rs, writes: &chunks, reply: reply.map(|n| &segs[..n]) };
        let body = Body::Msg(lists);
        let v = enc(&body, 9, 9);
        assert_eq!(v.len(), msg_header_len(reads, writes, writes * per_chunk, reply));
        v
    }

    #[test]
    fn limits_are_enforced() {
        let lim = Limits { max_read_segments: 3, max_write_chunks: 2, max_chunk_segments: 4, max_write_segments: 6 };
        let ok = |v: &[u8]| Header::decode(v, &lim).map(|_| ());
        assert_eq!(ok(&shape(3, 0, 0, None)), Ok(()));
        assert_eq!(ok(&shape(4, 0, 0, None)), Err(V1Error::TooManyReadSegments { max: 3 }));
        assert_eq!(ok(&shape(0, 2, 3, None)), Ok(()));
        assert_eq!(ok(&shape(0, 3, 1, None)), Err(V1Error::TooManyWriteChunks { max: 2 }));
        assert_eq!(ok(&shape(0, 1, 5, None)), Err(V1Error::TooManyChunkSegments { count: 5, max: 4 }));
        assert_eq!(ok(&shape(0, 2, 4, None)), Err(V1Error::TooManyWriteSegments { max: 6 }));
        assert_eq!(ok(&shape(0, 0, 0, Some(4))), Ok(()));
        assert_eq!(ok(&shape(0, 0, 0, Some(5))), Err(V1Error::TooManyChunkSegments { count: 5, max: 4 }));
        let zero = Limits { max_read_segments: 0, max_write_chunks: 0, max_chunk_segments: 0, max_write_segments: 0 };
        assert_eq!(Header::decode(&MSG_PLAIN, &zero).map(|h| h.header_len), Ok(28));
        assert_eq!(Header::decode(&shape(0, 1, 0, Some(0)), &zero), Err(V1Error::TooManyWriteChunks { max: 0 }));
        assert_eq!(Header::decode(&shape(0, 0, 0, Some(0)), &zero).map(|h| h.header_len), Ok(32));
        assert_eq!(Limits::default(), Limits::DEFAULT);
        // Many empty write chunks are bounded by the chunk limit, not by segments.
        assert_eq!(dec(&shape(0, 33, 0, None)), Err(V1Error::TooManyWriteChunks { max: 32 }));
    }

    #[test]
    fn read_chunks_group_runs_of_one_position() {
        let mut rs = [READS[0]; 6];
        for (i, p) in [0u32, 0, 8, 16, 16, 0].iter().enumerate() {
            rs[i].position = *p;
            rs[i].segment.handle = i as u32;
        }
        let v = enc(&Body::Msg(ChunkLists { reads: &rs, writes: &[], reply: None }), 1, 1);
        let h = dec(&v).unwrap();
        let reads = chunks_of(&h).reads;
        let got: Vec<(u32, Vec<u32>)> =
            reads.chunks().map(|c| (c.position, c.segments.iter().map(|s| s.segment.handle).collect())).collect();
        assert_eq!(got, [(0, vec![0, 1]), (8, vec![2]), (16, vec![3, 4]), (0, vec![5])]);
        assert_eq!(ReadList::EMPTY.chunks().next(), None);
        assert_eq!(reads.iter().len(), 6);
    }

    #[test]
    fn views_count_down_exactly_and_print_their_bytes() {
        let h = dec(&MSG_CHUNKS).unwrap();
        let c = chunks_of(&h);
        let mut it = c.reads.iter();
        assert_eq!(it.len(), 2);
        assert_eq!(it.next(), Some(READS[0]));
        assert_eq!(it.size_hint(), (1, Some(1)));
        assert_eq!(it.next(), Some(READS[1]));
        assert_eq!((it.next(), it.next(), it.len()), (None, None, 0));
        let w0 = c.writes.get(0).unwrap();
        let mut it = (&w0).into_iter();
        assert_eq!((it.next(), it.len()), (Some(WRITE0[0]), 1));
        assert_eq!(it.clone().last(), Some(WRITE0[1]));
        assert_eq!(w0.into_iter().nth(1), Some(WRITE0[1]));
        assert_eq!(c.reads.into_iter().map(|r| r.position).sum::<u32>(), 0x80);
        assert_eq!(c.writes.into_iter().len(), 1);
        assert_eq!(SegmentArray::EMPTY.iter().next(), None);
        assert_eq!(ReadList::EMPTY.get(0), None);

        // Debug shows the encoded bytes, as it always has.
        let one = [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3];
        let mut r = XdrReader::new(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3]);
        let a = SegmentArray::decode(&mut r, &Limits::DEFAULT).unwrap();
        assert_eq!(a.as_bytes(), one);
        assert_eq!(format!("{a:?}"), "SegmentArray { bytes: [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3] }");
        assert_eq!(format!("{:?}", a.iter()), "SegmentIter { rest: [0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3] }");
        assert_eq!(format!("{:?}", ReadList::EMPTY), "ReadList { bytes: [] }");
        assert_eq!(format!("{:?}", ReadList::EMPTY.iter()), "ReadIter { rest: [] }");
        assert_eq!(format!("{:?}", ReadList::EMPTY.chunks()), "ReadChunks { rest: [] }");
    }

    #[test]
    fn size_helpers() {
        assert_eq!(read_list_len(0), 4);
        assert_eq!(read_list_len(2), 52);
        assert_eq!(write_list_len(0, 0), 4);
        assert_eq!(write_list_len(1, 2), 44);
        assert_eq!(reply_chunk_len(None), 4);
        assert_eq!(reply_chunk_len(Some(0)), 8);
        assert_eq!(reply_chunk_len(Some(1)), 24);
        assert_eq!(chunk_lists_len(0, 0, 0, None), EMPTY_CHUNK_LISTS_LEN);
        assert_eq!(msg_header_len(usize::MAX, 1, 1, None), usize::MAX);
        assert_eq!(xdr_round_up(0), Some(0));
        assert_eq!(xdr_round_up(1), Some(4));
        assert_eq!(xdr_round_up(4), Some(4));
        assert_eq!(xdr_round_up(4097), Some(4100));
        assert_eq!(xdr_round_up(0xffff_fffc), Some(0xffff_fffc));
        assert_eq!(xdr_round_up(0xffff_fffd), None);
        assert_eq!(xdr_round_up(u32::MAX), None);
        assert_eq!(SegmentArray::EMPTY.total_length(), 0);
        assert_eq!(MIN_HEADER_LEN, 16);
    }

    // ---- Round trips over random shapes ----

    fn random_segment(rng: &mut Rng) -> Segment {
        Segment { handle: rng.low_u32(), length: rng.low_u32(), offset: rng.next() }
    }

    /// Collects a decoded header's chunk lists into owned vectors.
    fn owned(c: &Chunks<'_>) -> (Vec<ReadSegment>, Vec<Vec<Segment>>, Option<Vec<Segment>>) {
        (
            c.reads.iter().collect(),
            c.writes.iter().map(|a| a.iter().collect()).collect(),
            c.reply.map(|a| a.iter().collect()),
        )
    }

    /// Re-encodes a decoded header through the slice-based encoder.
    fn reencode_via_slices(h: &Header<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; h.header_len + 64];
        let n = match h.body {
            Body::Msg(_) | Body::NoMsg(_) | Body::Msgp { .. } => {
                let (r, w, rep) = owned(&chunks_of(h));
                let wrefs: Vec<&[Segment]> = w.iter().map(|c| &c[..]).collect();
                let lists = ChunkLists { reads: &r, writes: &wrefs, reply: rep.as_deref() };
                let body = match h.body {
                    Body::Msg(_) => Body::Msg(lists),
                    Body::NoMsg(_) => Body::NoMsg(lists),
                    Body::Msgp { align, thresh, .. } => Body::Msgp { align, thresh, chunks: lists },
                    _ => unreachable!(),
                };
                encode(&mut buf, h.xid, h.credits, &body).unwrap()
            }
            Body::Done => encode_done(&mut buf, h.xid, h.credits).unwrap(),
            Body::Error(ErrorBody::Vers { low, high }) => encode_err_vers(&mut buf, h.xid, h.credits, low, high).unwrap(),
            Body::Error(ErrorBody::Chunk) => encode_err_chunk(&mut buf, h.xid, h.credits).unwrap(),
        };
        buf.truncate(n);
        buf
    }

    #[test]
    fn random_round_trips() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let reads: Vec<ReadSegment> = (0..rng.below(6))
                .map(|_| ReadSegment { position: rng.low_u32() & !3, segment: random_segment(&mut rng) })
                .collect();
            let writes: Vec<Vec<Segment>> =
                (0..rng.below(4)).map(|_| (0..rng.below(5)).map(|_| random_segment(&mut rng)).collect()).collect();
            let wrefs: Vec<&[Segment]> = writes.iter().map(|c| &c[..]).collect();
            let reply: Option<Vec<Segment>> = match rng.below(3) {
                0 => None,
                _ => Some((0..rng.below(4)).map(|_| random_segment(&mut rng)).collect()),
            };
            let lists = ChunkLists { reads: &reads, writes: &wrefs, reply: reply.as_deref() };
            let (xid, credits) = (rng.low_u32(), rng.low_u32());
            let body = match rng.below(6) {
                0 => Body::Msg(lists),
                1 => Body::NoMsg(lists),
                2 => Body::Msgp { align: rng.low_u32(), thresh: rng.low_u32(), chunks: lists },
                3 => Body::Done,
                4 => Body::Error(ErrorBody::Vers { low: rng.low_u32(), high: rng.low_u32() }),
                _ => Body::Error(ErrorBody::Chunk),
            };
            let mut bytes = enc(&body, xid, credits);
            let hdr_len = bytes.len();
            bytes.extend_from_slice(&[0xee; 12]);
            let (h, payload) = Header::decode_split(&bytes, &Limits::DEFAULT).unwrap();
            assert_eq!((h.xid, h.credits, h.header_len, h.procedure()), (xid, credits, hdr_len, body.procedure()));
            assert_eq!(payload, &[0xee; 12]);
            match (&h.body, &body) {
                (Body::Msgp { align: a1, thresh: t1, .. }, Body::Msgp { align: a2, thresh: t2, .. }) => {
                    assert_eq!((a1, t1), (a2, t2))
                }
                (Body::Error(e1), Body::Error(e2)) => assert_eq!(e1, e2),
                _ => {}
            }
            if let Some(c) = h.body.chunks() {
                let (r, w, rep) = owned(c);
                assert_eq!(r, reads);
                assert_eq!(w, writes);
                assert_eq!(rep, reply);
                assert_eq!(c.writes.segment_count(), writes.iter().map(Vec::len).sum::<usize>());
                assert_eq!(c.encoded_len(), lists.encoded_len());
            }
            let mut again = vec![0u8; hdr_len];
            assert_eq!(h.encode(&mut again), Ok(hdr_len));
            assert_eq!(again, &bytes[..hdr_len]);
        }
    }

    // ---- Deterministic mutation fuzzing ----

    fn mutate(rng: &mut Rng, v: &mut Vec<u8>) {
        match rng.below(7) {
            0 => {
                // Flip a few bits.
                for _ in 0..=rng.below(3) {
                    if !v.is_empty() {
                        let i = rng.below(v.len() as u64) as usize;
                        v[i] ^= 1 << rng.below(8);
                    }
                }
            }
            1 => {
                let n = rng.below(v.len() as u64 + 1) as usize;
                v.truncate(n);
            }
            2 | 3 => {
                // Insert a word at a word boundary (interesting values).
                let word: u32 = match rng.below(5) {
                    0 => 0,
                    1 => 1,
                    2 => u32::MAX,
                    3 => rng.below(8) as u32,
                    _ => rng.low_u32(),
                };
                let at = (rng.below(v.len() as u64 / 4 + 1) * 4) as usize;
                let at = at.min(v.len());
                for (k, b) in word.to_be_bytes().iter().enumerate() {
                    v.insert(at + k, *b);
                }
            }
            4 => {
                // Overwrite an aligned word.
                if v.len() >= 4 {
                    let at = (rng.below(v.len() as u64 / 4) * 4) as usize;
                    let word = [0u32, 1, 2, 3, 4, u32::MAX, 0x8000_0000][rng.below(7) as usize];
                    v[at..at + 4].copy_from_slice(&word.to_be_bytes());
                }
            }
            5 => {
                // Delete a word.
                if v.len() >= 4 {
                    let at = (rng.below(v.len() as u64 / 4) * 4) as usize;
                    v.drain(at..at + 4);
                }
            }
            _ => {
                // Random byte at a random place.
                if !v.is_empty() {
                    let i = rng.below(v.len() as u64) as usize;
                    v[i] = rng.low_u32() as u8;
                }
            }
        }
    }

    #[test]
    fn mutation_fuzz_never_panics_and_reencodes_consistently() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let small = Limits { max_read_segments: 4, max_write_chunks: 3, max_chunk_segments: 4, max_write_segments: 6 };
        let mut ok = 0u32;
        for i in 0..40_000u32 {
            let (v, _) = VECTORS[(i as usize) % VECTORS.len()];
            let mut m = v.to_vec();
            for _ in 0..=rng.below(4) {
                mutate(&mut rng, &mut m);
            }
            let limits = if i % 3 == 0 { small } else { Limits::UNBOUNDED };
            let _ = peek(&m);
            let _ = decode_error_any_version(&m);
            if let Ok(h) = Header::decode(&m, &limits) {
                ok += 1;
                assert!(h.header_len <= m.len());
                let mut buf = vec![0u8; h.header_len];
                assert_eq!(h.encode(&mut buf), Ok(h.header_len));
                assert_eq!(buf, &m[..h.header_len]);
                assert_eq!(reencode_via_slices(&h), &m[..h.header_len]);
                assert_eq!(Header::decode(&buf, &limits), Ok(h));
                if let Some(c) = h.body.chunks() {
                    // Exercise every accessor on the validated views.
                    let _ = c.reads.chunks().count();
                    let _ = c.reads.total_length();
                    assert_eq!(c.writes.iter().count(), c.writes.len());
                    for a in c.writes.iter().chain(c.reply) {
                        assert_eq!(a.iter().count(), a.len());
                        let _ = a.total_length();
                    }
                }
            }
        }
        // The mutations must leave a fair share decodable, or the test proves little.
        assert!(ok > 4_000, "only {ok} mutated headers decoded");
    }

    /// A reply chunk as a responder hands it back, decoded from a header.
    fn returned(segs: &[Segment]) -> Vec<u8> {
        let mut m = vec![0u8; 256];
        let lists = ChunkLists { reads: &[], writes: &[], reply: Some(segs) };
        let n = encode(&mut m, 7, 1, &Body::NoMsg(lists)).unwrap();
        m.truncate(n);
        m
    }

    /// A chunk filled as a responder fills it is one the requester's
    /// check accepts, for exactly the bytes placed; a result larger than
    /// the chunk, or a buffer too short for the returned chunk, is refused.
    #[test]
    fn filled_chunks_pass_the_requesters_check() {
        let seg = |handle, length, offset| Segment { handle, length, offset };
        let offered = [seg(0x11, 100, 0x1000), seg(0x22, 200, 0x2000), seg(0x33, 300, 0x3000)];
        let mut out = [Segment::default(); 4];
        assert_eq!(fill_chunk(&offered, 250, &mut out), Ok(3));
        assert_eq!(&out[..3], &[seg(0x11, 100, 0x1000), seg(0x22, 150, 0x2000), seg(0x33, 0, 0x3000)]);
        assert_eq!(fill_chunk(&offered, 601, &mut out), Err(FillError::TooSmall));
        assert_eq!(fill_chunk(&offered, 600, &mut out[..2]), Err(FillError::NoRoom));
        let mut rng = crate::testutil::Rng(0xf111_c4a2);
        for _ in 0..5_000 {
            let n = 1 + rng.below(5) as usize;
            let offered: Vec<Segment> =
                (0..n).map(|i| seg(0x100 + i as u32, rng.below(5000) as u32, 0x10000 * (i as u64 + 1))).collect();
            let room: u64 = offered.iter().map(|s| u64::from(s.length)).sum();
            let len = rng.below(room + 2) as u32;
            let mut out = vec![Segment::default(); n];
            match fill_chunk(&offered, len, &mut out) {
                Ok(k) => {
                    assert!(u64::from(len) <= room);
                    let m = returned(&out[..k]);
                    let h = Header::decode(&m, &Limits::DEFAULT).unwrap();
                    let reply = h.body.chunks().and_then(|c| c.reply).unwrap();
                    assert_eq!(check_returned_chunk(&offered, &reply), Ok(u64::from(len)));
                }
                Err(e) => {
                    assert_eq!(e, FillError::TooSmall);
                    assert!(u64::from(len) > room);
                }
            }
        }
    }

    #[test]
    fn returned_chunk_checked_against_offer() {
        let seg = |handle, length, offset| Segment { handle, length, offset };
        let offered = [seg(0x1001, 8192, 0x10_0000), seg(0x2002, 4096, 0x20_0000)];
        let check = |segs: &[Segment]| {
            let m = returned(segs);
            let h = Header::decode(&m, &Limits::DEFAULT).unwrap();
            let reply = h.body.chunks().and_then(|c| c.reply).unwrap();
            check_returned_chunk(&offered, &reply)
        };
        // Shorter lengths, and fewer segments, are what a responder that
        // wrote less returns.
        assert_eq!(check(&[seg(0x1001, 8192, 0x10_0000), seg(0x2002, 100, 0x20_0000)]), Ok(8292));
        assert_eq!(check(&[seg(0x1001, 0, 0x10_0000), seg(0x2002, 0, 0x20_0000)]), Ok(0));
        assert_eq!(check(&[seg(0x1001, 12, 0x10_0000)]), Ok(12));
        assert_eq!(check(&[]), Ok(0));
        // Longer than offered, a handle or offset never offered, segments
        // swapped, one segment too many.
        assert_eq!(
            check(&[seg(0x1001, 8193, 0x10_0000)]),
            Err(ReturnedChunkError::TooLong { index: 0 })
        );
        assert_eq!(
            check(&[seg(0x1001, 8192, 0x10_0000), seg(0x3003, 10, 0x20_0000)]),
            Err(ReturnedChunkError::ForeignSegment { index: 1 })
        );
        assert_eq!(check(&[seg(0x1001, 8, 0x10_0008)]), Err(ReturnedChunkError::ForeignSegment { index: 0 }));
        assert_eq!(
            check(&[seg(0x2002, 10, 0x20_0000), seg(0x1001, 10, 0x10_0000)]),
            Err(ReturnedChunkError::ForeignSegment { index: 0 })
        );
        let three = [offered[0], offered[1], seg(0x1001, 1, 0x10_0000)];
        assert_eq!(check(&three), Err(ReturnedChunkError::TooManySegments { returned: 3, offered: 2 }));
        // A repeated handle is foreign at its second place.
        assert_eq!(
            check(&[seg(0x1001, 8192, 0x10_0000), seg(0x1001, 10, 0x10_0000)]),
            Err(ReturnedChunkError::ForeignSegment { index: 1 })
        );
        // A gap: the first segment half filled and the second one written
        // (the shape a mounted client once took, handing the unwritten half
        // of its buffer up), or an empty first segment and a full second.
        assert_eq!(
            check(&[seg(0x1001, 4096, 0x10_0000), seg(0x2002, 4096, 0x20_0000)]),
            Err(ReturnedChunkError::Gap { index: 1 })
        );
        assert_eq!(
            check(&[seg(0x1001, 0, 0x10_0000), seg(0x2002, 1, 0x20_0000)]),
            Err(ReturnedChunkError::Gap { index: 1 })
        );
        assert_eq!(check(&[seg(0x1001, 8191, 0x10_0000), seg(0x2002, 0, 0x20_0000)]), Ok(8191));
    }

    /// Every shape of returned chunk, against a model of the memory a
    /// responder can have written: a chunk is accepted exactly when the
    /// first `total` bytes of the offered memory are bytes it wrote, each
    /// segment at its offered place.
    #[test]
    fn returned_chunk_accepts_only_written_prefixes() {
        let mut rng = crate::testutil::Rng(0x5eed_c0de);
        let seg = |handle, length, offset| Segment { handle, length, offset };
        for _ in 0..20_000 {
            let n = 1 + rng.below(4) as usize;
            let offered: Vec<Segment> =
                (0..n).map(|i| seg(0x100 + i as u32, 1 + rng.below(64) as u32, 0x1000 * (i as u64 + 1))).collect();
            let m = rng.below(n as u64 + 2) as usize;
            let mut got: Vec<Segment> = (0..m)
                .map(|i| {
                    let want = offered.get(i).copied().unwrap_or(seg(0x999, 1, 0));
                    let length = match rng.below(4) {
                        0 => 0,
                        1 => want.length,
                        2 => rng.below(u64::from(want.length) + 1) as u32,
                        _ => rng.below(130) as u32,
                    };
                    seg(want.handle, length, want.offset)
                })
                .collect();
            if rng.below(8) == 0 && m > 0 {
                let i = rng.below(m as u64) as usize;
                got[i].handle ^= 1 << rng.below(32);
            }
            let msg = returned(&got);
            let h = Header::decode(&msg, &Limits::UNBOUNDED).unwrap();
            let reply = h.body.chunks().and_then(|c| c.reply).unwrap();
            let verdict = check_returned_chunk(&offered, &reply);
            // The model: which offered bytes were written, in offer order.
            let mut written = Vec::new();
            let mut valid = got.len() <= offered.len();
            for (i, g) in got.iter().enumerate() {
                let Some(w) = offered.get(i) else { break };
                valid &= g.handle == w.handle && g.offset == w.offset && g.length <= w.length;
                for b in 0..w.length {
                    written.push(b < g.length);
                }
            }
            let total: u64 = got.iter().map(|g| u64::from(g.length)).sum();
            let prefix = written.iter().take(total as usize).all(|w| *w) && total as usize <= written.len();
            match verdict {
                Ok(t) => {
                    assert!(valid && prefix, "accepted {got:?} for {offered:?}");
                    assert_eq!(t, total);
                }
                Err(e) => assert!(!(valid && prefix), "refused {got:?} for {offered:?}: {e:?}"),
            }
        }
    }

    /// The one-Write-segment shortcut of [`Chunks::decode`] gives what the
    /// general list decoder gives, and leaves the reader at the same place,
    /// for lists near its shape (every word of the shape varied, the input
    /// cut anywhere) under limits that do and do not allow one segment.
    #[test]
    fn plain_msg_shortcut_agrees_with_decode_split() {
        let shape = [0x1234_5678u32, 1, 32, 0, 0, 0, 0, 0x8000_0001];
        let mut taken = 0;
        for_each_mutation(0x9e37_79b9_7f4a_7c15, &shape, |words, bytes| {
            let full = Header::decode_split(bytes, &Limits::DEFAULT);
            match decode_plain_msg(bytes) {
                Some((xid, credits, payload)) => {
                    taken += 1;
                    let (h, rest) = full.expect("a plain RDMA_MSG decodes");
                    assert_eq!((h.xid, h.credits, rest), (xid, credits, payload), "{words:x?}");
                    assert_eq!(h.body, Body::Msg(Chunks::EMPTY), "{words:x?}");
                }
                // Every header the shortcut leaves is another one.
                None => {
                    if let Ok((h, _)) = full {
                        assert!(h.body != Body::Msg(Chunks::EMPTY) || h.header_len != 28, "{words:x?}");
                    }
                }
            }
        });
        assert!(taken > 1000, "the shortcut ran {taken} times");
    }

    /// Calls `f` with 100 000 variants of the header `shape` (their words
    /// and bytes, see [`mutated`]).
    fn for_each_mutation(seed: u64, shape: &[u32], mut f: impl FnMut(&[u32], &[u8])) {
        let mut rng = crate::testutil::Rng(seed);
        for _ in 0..100_000 {
            let (words, bytes) = mutated(&mut rng, shape, 0);
            f(&words, &bytes);
        }
    }

    /// `shape` with up to two words changed (to nearby values, or random
    /// ones), fewer than `extra` small words added, and in one case of four
    /// cut short: its words, and its bytes.
    fn mutated(rng: &mut crate::testutil::Rng, shape: &[u32], extra: u64) -> (Vec<u32>, Vec<u8>) {
        let mut words: Vec<u32> = shape.to_vec();
        for _ in 0..rng.below(3) {
            let i = rng.below(words.len() as u64) as usize;
            words[i] = match rng.below(3) {
                0 => rng.below(3) as u32,
                1 => words[i].wrapping_add(1),
                _ => rng.u32(),
            };
        }
        if extra > 0 {
            for _ in 0..rng.below(extra) {
                words.push(rng.below(3) as u32);
            }
        }
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        if rng.below(4) == 0 {
            bytes.truncate(rng.below(bytes.len() as u64 + 1) as usize);
        }
        (words, bytes)
    }

    #[test]
    fn one_write_msg_shortcut_agrees_with_decode_split() {
        let shape = [0x1234_5678u32, 1, 32, 0, 0, 1, 1, 0xabcd, 4096, 0, 0x8000, 0, 0, 0x8000_0001];
        let mut taken = 0;
        for_each_mutation(0x6a09_e667_f3bc_c909, &shape, |words, bytes| {
            let full = Header::decode_split(bytes, &Limits::DEFAULT);
            match decode_one_write_msg(bytes) {
                Some((xid, credits, segs, payload)) => {
                    taken += 1;
                    let (h, rest) = full.expect("the shape decodes");
                    assert_eq!((h.xid, h.credits, rest), (xid, credits, payload), "{words:x?}");
                    let Body::Msg(c) = h.body else { panic!("not RDMA_MSG: {words:x?}") };
                    assert!(c.reads.is_empty() && c.reply.is_none(), "{words:x?}");
                    assert_eq!(c.writes.single(), Some(segs), "{words:x?}");
                }
                None => {
                    if let Ok((Header { body: Body::Msg(c), header_len, .. }, _)) = full {
                        let one =
                            c.reads.is_empty() && c.reply.is_none() && c.writes.single().is_some_and(|s| s.len() == 1);
                        assert!(!one || header_len != 52, "{words:x?}");
                    }
                }
            }
        });
        assert!(taken > 1000, "the shortcut ran {taken} times");
    }

    #[test]
    fn one_write_segment_shortcut_agrees_with_decode_lists() {
        let mut rng = crate::testutil::Rng(0x0123_4567_89ab_cdef);
        let shape = [0u32, 1, 1, 0x1234, 4096, 0, 0x8000, 0, 0];
        let mut taken = 0;
        for _ in 0..100_000 {
            let (words, bytes) = mutated(&mut rng, &shape, 4);
            let one = rng.below(2) as u32;
            let limits = match rng.below(5) {
                0 => Limits { max_write_chunks: one, ..Limits::DEFAULT },
                1 => Limits { max_chunk_segments: one, ..Limits::DEFAULT },
                2 => Limits { max_write_segments: one, ..Limits::DEFAULT },
                3 => Limits::UNBOUNDED,
                _ => Limits::DEFAULT,
            };
            let (mut fast, mut slow) = (XdrReader::new(&bytes), XdrReader::new(&bytes));
            let got = Chunks::decode(&mut fast, &limits);
            let want = Chunks::decode_lists(&mut slow, &limits);
            if bytes.first_chunk::<EMPTY_CHUNK_LISTS_LEN>() != Some(&[0; EMPTY_CHUNK_LISTS_LEN]) {
                assert_eq!(got, want, "{words:x?} {limits:?}");
                if got.is_ok() {
                    assert_eq!(fast.position(), slow.position(), "{words:x?}");
                }
            }
            if let Ok(c) = want {
                // The only chunk, taken without parsing, is the iterator's.
                assert_eq!(c.writes.single(), if c.writes.len() == 1 { c.writes.iter().next() } else { None });
                taken += usize::from(c.writes.len() == 1 && c.writes.segment_count() == 1);
            }
        }
        assert!(taken > 10_000, "the shape itself was decoded {taken} times");
    }

    /// The one-segment check of a returned chunk agrees with the loop.
    #[test]
    fn returned_chunk_one_segment_agrees_with_loop() {
        let mut rng = crate::testutil::Rng(0xfeed_5eed);
        let near = |rng: &mut crate::testutil::Rng, v: u32| match rng.below(3) {
            0 => v,
            1 => v.wrapping_add(rng.below(3) as u32).wrapping_sub(1),
            _ => rng.u32(),
        };
        for _ in 0..50_000 {
            let want = Segment { handle: rng.u32(), length: rng.u32() % 9000, offset: rng.next() };
            let got = Segment {
                handle: near(&mut rng, want.handle),
                length: near(&mut rng, want.length),
                offset: if rng.below(4) == 0 { rng.next() } else { want.offset },
            };
            let m = returned(&[got]);
            let h = Header::decode(&m, &Limits::DEFAULT).unwrap();
            let reply = h.body.chunks().and_then(|c| c.reply).unwrap();
            assert_eq!(
                check_returned_chunk(&[want], &reply),
                check_returned_chunk_loop(&[want], &reply),
                "{got:?} {want:?}"
            );
        }
    }
}
