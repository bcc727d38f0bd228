// SPDX-License-Identifier: GPL-2.0
//! Transport characteristics extension to RPC-over-RDMA Version Two.
//!
//! Implements draft-dnoveck-nfsv4-rpcrdma-xcharext-02 (section numbers below
//! refer to it): the OPTIONAL operations `ROPT_INITXCH`, `ROPT_REQXCH`,
//! `ROPT_RESPXCH` and `ROPT_UPDXCH` carried in the `rdma_optinfo` of a
//! Version Two `RDMA2_OPTIONAL` header ([`super::v2::Optional`]), and the
//! characteristics `XCHAR_RBSIZ`, `XCHAR_REQREMINV` and `XCHAR_BRS`.
//!
//! Decoding is zero-copy: an [`XcharSpec`] or [`XcharSubset`] returned by a
//! decoder is a view of bytes that were fully validated first, including the
//! values of every characteristic this implementation knows (section 2.1), so
//! iterating cannot fail. Characteristics with unknown ids are kept as
//! [`Xchar::Other`] and ignored when merged (sections 2.1 and 4.1).
//!
//! Choices made where the draft is silent or damaged:
//!
//! * Section 2.1 lists when a receiver that knows an `xcharid` "MUST report an
//!   XDR error", but the list itself is lost. We report
//!   [`XcharError::BadValue`] when `xchv_data` is not exactly the size of the
//!   characteristic's XDR type (4 bytes for all three defined here) or when the
//!   value is not valid for that type (a bool other than 0/1, a `bkreqsup`
//!   outside 0..=2). An XDR error is answered with `RDMA2_ERR_BAD_HEADER`
//!   ([`XcharError::reply`]).
//! * `rdma_optinfo` must hold exactly the operation's XDR; extra bytes are an
//!   error ([`XcharError::TrailingBytes`]).
//! * `xcharsubset` bit numbering (section 2.1, "bit number N mod 32 in word N
//!   div 32"): bit 0 is the least significant bit of the word, as for NFSv4's
//!   `bitmap4`, so element N is `words[N / 32] >> (N % 32) & 1`.
//! * Implementation limits: at most [`MAX_XCHARVALS`] characteristics in an
//!   `xcharspec` and [`MAX_SUBSET_WORDS`] words in an `xcharsubset`.
//! * When one `xcharspec` names the same characteristic twice, the later value
//!   wins on merge.
//! * A Receive Buffer Size below [`MIN_RBSIZ`] (the 1 KiB every RPC-over-RDMA
//!   peer must accept) is not applied; the merge reports it as invalid
//!   (section 7: a forged small value could otherwise break the connection).

use super::v2::{Direction, ErrorBody, Optional, RDMA2_OPTIONAL, RPCRDMA_VERSION_2};
use super::xdr::{align4, XdrError, XdrReader, XdrWriter};
use core::fmt;

/// `rdma_opttype` of "Specify Initial Characteristics" (section 4.1).
pub const ROPT_INITXCH: u32 = 1;
/// `rdma_opttype` of "Request Characteristic Modification" (section 4.2).
pub const ROPT_REQXCH: u32 = 2;
/// `rdma_opttype` of "Respond to Modification Request" (section 4.3).
pub const ROPT_RESPXCH: u32 = 3;
/// `rdma_opttype` of "Report Updated Characteristics" (section 4.4).
pub const ROPT_UPDXCH: u32 = 4;

/// `xcharid` of the Receive Buffer Size (`xchrbsiz`, a uint32; section 3.1).
pub const XCHAR_RBSIZ: u32 = 1;
/// `xcharid` of Requester Remote Invalidation (`xchrreqrem`, a bool;
/// section 3.2).
pub const XCHAR_REQREMINV: u32 = 2;
/// `xcharid` of Backward Request Support (`xchrbrs`, an enum `bkreqsup`;
/// section 3.3).
pub const XCHAR_BRS: u32 = 3;

/// `bkreqsup` BKREQSUP_NONE: no backward-direction requests.
pub const BKREQSUP_NONE: u32 = 0;
/// `bkreqsup` BKREQSUP_INLINE: backward requests conveyed inline only.
pub const BKREQSUP_INLINE: u32 = 1;
/// `bkreqsup` BKREQSUP_GENL: general backward request support (chunks too).
pub const BKREQSUP_GENL: u32 = 2;

/// First `xcharid` of the range reserved for experimental use (section 6.2,
/// 4,294,967,040 to 4,294,967,295).
pub const XCHAR_EXPERIMENTAL_FIRST: u32 = 0xffff_ff00;

/// Default Receive Buffer Size (Table 1).
pub const DEFAULT_RBSIZ: u32 = 4096;
/// Smallest Receive Buffer Size the merge accepts (see module docs).
pub const MIN_RBSIZ: u32 = 1024;
/// Largest number of `xcharval`s accepted in one `xcharspec`.
pub const MAX_XCHARVALS: u32 = 256;
/// Largest number of words accepted in one `xcharsubset` (enough for
/// [`MAX_XCHARVALS`] elements).
pub const MAX_SUBSET_WORDS: u32 = 8;

/// Minimum encoded size of one `xcharval` (id and empty data).
const MIN_XCHARVAL_SIZE: usize = 8;

/// True if `id` is in the experimental range (section 6.2).
pub const fn is_experimental(id: u32) -> bool {
    id >= XCHAR_EXPERIMENTAL_FIRST
}

/// True if `id` is a characteristic this implementation interprets.
pub const fn is_known_id(id: u32) -> bool {
    matches!(id, XCHAR_RBSIZ | XCHAR_REQREMINV | XCHAR_BRS)
}

/// True if `opttype` is one of this extension's operations.
pub const fn is_xchar_opttype(opttype: u32) -> bool {
    matches!(opttype, ROPT_INITXCH | ROPT_REQXCH | ROPT_RESPXCH | ROPT_UPDXCH)
}

/// A failure decoding or encoding a transport characteristics operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XcharError {
    /// An XDR primitive failed (truncation, bad boolean, no space to encode).
    Xdr(XdrError),
    /// A known characteristic's `xchv_data` has the wrong length or an invalid
    /// value (section 2.1); when encoding, an [`Xchar::Other`] used a known id.
    BadValue {
        /// The characteristic id.
        id: u32,
    },
    /// An `xcharspec` declared more than [`MAX_XCHARVALS`] elements.
    TooManyValues(u32),
    /// An `xcharsubset` declared more than [`MAX_SUBSET_WORDS`] words.
    SubsetTooLong(u32),
    /// `rdma_optinfo` had this many bytes after the operation's XDR.
    TrailingBytes(usize),
    /// `rdma_opttype` is not an operation of this extension.
    UnknownOperation(u32),
}

impl From<XdrError> for XcharError {
    fn from(e: XdrError) -> Self {
        XcharError::Xdr(e)
    }
}

impl XcharError {
    /// The `RDMA2_ERROR` body to answer a received message that failed with
    /// this error: `ERR_INVAL_OPTION` for an unsupported operation (section 4
    /// and draft-rpcrdma-version-two section 3.1), `ERR_BAD_HEADER` for an
    /// XDR error.
    pub const fn reply(&self) -> ErrorBody {
        match self {
            XcharError::UnknownOperation(_) => ErrorBody::InvalOption,
            _ => ErrorBody::BadHeader,
        }
    }
}

/// Backward Request Support levels (`enum bkreqsup`, section 3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BkReqSup {
    /// BKREQSUP_NONE: backward-direction requests are not supported.
    None,
    /// BKREQSUP_INLINE: only requests and replies that fit inline (the
    /// default).
    #[default]
    Inline,
    /// BKREQSUP_GENL: general support, including chunks.
    General,
}

impl BkReqSup {
    /// Decodes a `bkreqsup` value.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            BKREQSUP_NONE => Some(BkReqSup::None),
            BKREQSUP_INLINE => Some(BkReqSup::Inline),
            BKREQSUP_GENL => Some(BkReqSup::General),
            _ => None,
        }
    }

    /// The `bkreqsup` value.
    pub const fn as_u32(self) -> u32 {
        match self {
            BkReqSup::None => BKREQSUP_NONE,
            BkReqSup::Inline => BKREQSUP_INLINE,
            BkReqSup::General => BKREQSUP_GENL,
        }
    }
}

/// One characteristic value (`xcharval`), typed when the id is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xchar<'a> {
    /// `XCHAR_RBSIZ`: minimum size in bytes of the sender's pre-posted
    /// receive buffers.
    RecvBufSize(u32),
    /// `XCHAR_REQREMINV`: as a requester, the sender accepts Send With
    /// Invalidate for replies.
    ReqRemInv(bool),
    /// `XCHAR_BRS`: the sender's support for backward-direction requests.
    BackwardRequest(BkReqSup),
    /// A characteristic this implementation does not interpret, kept raw.
    /// Decoders never produce this for a known id, and encoders reject it.
    Other {
        /// `xchv_which`.
        id: u32,
        /// `xchv_data`, uninterpreted.
        data: &'a [u8],
    },
}

impl<'a> Xchar<'a> {
    /// Builds a characteristic from its id and `xchv_data`, validating the
    /// data when the id is known (section 2.1).
    pub fn from_parts(id: u32, data: &'a [u8]) -> Result<Self, XcharError> {
        if !is_known_id(id) {
            return Ok(Xchar::Other { id, data });
        }
        let bad = XcharError::BadValue { id };
        let v = match data {
            [a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => return Err(bad),
        };
        match id {
            XCHAR_RBSIZ => Ok(Xchar::RecvBufSize(v)),
            XCHAR_REQREMINV => match v {
                0 => Ok(Xchar::ReqRemInv(false)),
                1 => Ok(Xchar::ReqRemInv(true)),
                _ => Err(bad),
            },
            _ => BkReqSup::from_u32(v).map(Xchar::BackwardRequest).ok_or(bad),
        }
    }

    /// The `xcharid`.
    pub const fn id(&self) -> u32 {
        match self {
            Xchar::RecvBufSize(_) => XCHAR_RBSIZ,
            Xchar::ReqRemInv(_) => XCHAR_REQREMINV,
            Xchar::BackwardRequest(_) => XCHAR_BRS,
            Xchar::Other { id, .. } => *id,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Xchar::Other { data, .. } => align4(data.len().min(usize::MAX - 3)).saturating_add(8),
            _ => 12,
        }
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        let v = match *self {
            Xchar::RecvBufSize(v) => v,
            Xchar::ReqRemInv(b) => u32::from(b),
            Xchar::BackwardRequest(b) => b.as_u32(),
            Xchar::Other { id, data } => {
                if is_known_id(id) {
                    return Err(XcharError::BadValue { id });
                }
                w.put_u32(id)?;
                return Ok(w.put_opaque_var(data)?);
            }
        };
        w.put_u32(self.id())?;
        w.put_u32(4)?;
        Ok(w.put_u32(v)?)
    }

    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XcharError> {
        let id = r.u32()?;
        let data = r.opaque_var(u32::MAX)?;
        Xchar::from_parts(id, data)
    }
}

/// An element of an `xcharspec` or `xcharsubset`: read again from the
/// validated bytes of a [`View`], or written from the caller's slice.
trait Element<'a>: Copy {
    /// Decodes the next element (never fails on bytes the decoder accepted).
    fn read(r: &mut XdrReader<'a>) -> Option<Self>;

    /// Encodes the element.
    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError>;
}

impl<'a> Element<'a> for Xchar<'a> {
    fn read(r: &mut XdrReader<'a>) -> Option<Self> {
        Xchar::decode(r).ok()
    }

    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        self.encode(w)
    }
}

impl<'a> Element<'a> for u32 {
    fn read(r: &mut XdrReader<'a>) -> Option<Self> {
        r.u32().ok()
    }

    fn write(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        Ok(w.put_u32(*self)?)
    }
}

/// The body of [`XcharSpec`] and [`XcharSubset`]: `count` validated elements
/// as they arrived, or the caller's slice to encode. Equality, `Debug` (a
/// list of the elements) and the iterators go by elements, whatever the form.
#[derive(Clone, Copy)]
enum View<'a, T> {
    Wire { bytes: &'a [u8], count: u32 },
    Native(&'a [T]),
}

impl<'a, T: Element<'a>> View<'a, T> {
    fn len(&self) -> usize {
        match self {
            View::Wire { count, .. } => *count as usize,
            View::Native(s) => s.len(),
        }
    }

    fn iter(&self) -> IterState<'a, T> {
        match *self {
            View::Wire { bytes, count } => IterState::Wire { r: XdrReader::new(bytes), left: count },
            View::Native(s) => IterState::Native(s.iter()),
        }
    }

    /// Encodes the count, then the elements; `too_many` if the count does
    /// not fit in 32 bits.
    fn encode(&self, w: &mut XdrWriter<'_>, too_many: XcharError) -> Result<(), XcharError> {
        match *self {
            View::Wire { bytes, count } => {
                w.put_u32(count)?;
                w.put_bytes(bytes)?;
            }
            View::Native(s) => {
                w.put_u32(u32::try_from(s.len()).map_err(|_| too_many)?)?;
                for x in s {
                    x.write(w)?;
                }
            }
        }
        Ok(())
    }
}

impl<T> Default for View<'_, T> {
    fn default() -> Self {
        View::Native(&[])
    }
}

impl<'a, T: Element<'a> + PartialEq> PartialEq for View<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: Element<'a> + Eq> Eq for View<'a, T> {}

impl<'a, T: Element<'a> + fmt::Debug> fmt::Debug for View<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iteration over a [`View`], shared by [`XcharIter`] and [`SubsetWords`].
#[derive(Clone)]
enum IterState<'a, T> {
    Wire { r: XdrReader<'a>, left: u32 },
    Native(core::slice::Iter<'a, T>),
}

impl<'a, T: Element<'a>> Iterator for IterState<'a, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            IterState::Native(it) => it.next().copied(),
            IterState::Wire { r, left } => {
                *left = left.checked_sub(1)?;
                T::read(r)
            }
        }
    }
}

/// A set of characteristic values (`xcharspec`): a borrowed, validated view.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct XcharSpec<'a>(View<'a, Xchar<'a>>);

impl<'a> XcharSpec<'a> {
    /// An empty set.
    pub const fn empty() -> Self {
        XcharSpec(View::Native(&[]))
    }

    /// A set holding `vals`, for encoding.
    pub const fn from_slice(vals: &'a [Xchar<'a>]) -> Self {
        XcharSpec(View::Native(vals))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Iterates over the elements in wire order (positions 0, 1, ... as used
    /// by [`XcharSubset`]).
    pub fn iter(&self) -> XcharIter<'a> {
        XcharIter(self.0.iter())
    }

    /// Iterates over the ids of elements this implementation does not know.
    pub fn unknown_ids(&self) -> impl Iterator<Item = u32> + 'a {
        self.iter().map(|x| x.id()).filter(|id| !is_known_id(*id))
    }

    fn encoded_len(&self) -> usize {
        match self.0 {
            View::Wire { bytes, .. } => bytes.len().saturating_add(4),
            View::Native(s) => s.iter().fold(4usize, |acc, x| acc.saturating_add(x.encoded_len())),
        }
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        self.0.encode(w, XcharError::TooManyValues(u32::MAX))
    }

    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XcharError> {
        let count = r.u32()?;
        if count > MAX_XCHARVALS {
            return Err(XcharError::TooManyValues(count));
        }
        let at = r.position();
        let need = (count as usize).saturating_mul(MIN_XCHARVAL_SIZE);
        if need > r.remaining() {
            return Err(XcharError::Xdr(XdrError::Truncated { at, need }));
        }
        let start = r.rest();
        for _ in 0..count {
            Xchar::decode(r)?;
        }
        let len = r.position().saturating_sub(at);
        let bytes = start.get(..len).ok_or(XcharError::Xdr(XdrError::Truncated { at, need: len }))?;
        Ok(XcharSpec(View::Wire { bytes, count }))
    }
}

impl fmt::Debug for XcharSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'a> IntoIterator for &XcharSpec<'a> {
    type Item = Xchar<'a>;
    type IntoIter = XcharIter<'a>;
    fn into_iter(self) -> XcharIter<'a> {
        self.iter()
    }
}

/// Iterator over an [`XcharSpec`].
#[derive(Clone)]
pub struct XcharIter<'a>(IterState<'a, Xchar<'a>>);

impl<'a> Iterator for XcharIter<'a> {
    type Item = Xchar<'a>;
    fn next(&mut self) -> Option<Xchar<'a>> {
        self.0.next()
    }
}

/// A subset of the positions of an earlier `xcharspec` (`xcharsubset`, a
/// bitmap of uint32 words): a borrowed, validated view. Words beyond the last
/// one present read as zero.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct XcharSubset<'a>(View<'a, u32>);

impl<'a> XcharSubset<'a> {
    /// The empty subset (no words).
    pub const fn empty() -> Self {
        XcharSubset(View::Native(&[]))
    }

    /// A subset from bitmap words (element N is bit N % 32, counting from the
    /// least significant bit, of `words[N / 32]`), for encoding.
    pub const fn from_words(words: &'a [u32]) -> Self {
        XcharSubset(View::Native(words))
    }

    /// Number of words present on the wire.
    pub fn word_count(&self) -> usize {
        self.0.len()
    }

    /// Word `i` of the bitmap (zero beyond the last word present).
    pub fn word(&self, i: usize) -> u32 {
        match self.0 {
            View::Native(s) => s.get(i).copied().unwrap_or(0),
            View::Wire { bytes, .. } => {
                let Some(start) = i.checked_mul(4) else { return 0 };
                match bytes.get(start..).and_then(|b| b.get(..4)) {
                    Some([a, b, c, d]) => u32::from_be_bytes([*a, *b, *c, *d]),
                    _ => 0,
                }
            }
        }
    }

    /// True if element `n` of the corresponding `xcharspec` is in the subset.
    pub fn contains(&self, n: usize) -> bool {
        self.word(n / 32) >> (n % 32) & 1 != 0
    }

    /// Iterates over the words present.
    pub fn words(&self) -> SubsetWords<'a> {
        SubsetWords(self.0.iter())
    }

    /// True if any element at position `n` or higher is in the subset (for
    /// checking a subset against an `xcharspec` of `n` elements).
    pub fn any_at_or_above(&self, n: usize) -> bool {
        // Word n / 32 holds position n: only its bits n % 32 and up count.
        let mut words = self.words().skip(n / 32);
        words.next().is_some_and(|w| w >> (n % 32) != 0) || words.any(|w| w != 0)
    }

    fn encoded_len(&self) -> usize {
        self.0.len().saturating_mul(4).saturating_add(4)
    }

    fn encode(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        self.0.encode(w, XcharError::SubsetTooLong(u32::MAX))
    }

    fn decode(r: &mut XdrReader<'a>) -> Result<Self, XcharError> {
        let count = r.u32()?;
        if count > MAX_SUBSET_WORDS {
            return Err(XcharError::SubsetTooLong(count));
        }
        let bytes = r.take((count as usize).saturating_mul(4))?; // exact: count <= MAX_SUBSET_WORDS
        Ok(XcharSubset(View::Wire { bytes, count }))
    }
}

impl fmt::Debug for XcharSubset<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Iterator over the words of an [`XcharSubset`].
#[derive(Clone)]
pub struct SubsetWords<'a>(IterState<'a, u32>);

impl Iterator for SubsetWords<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        self.0.next()
    }
}

/// One operation of this extension: the decoded `rdma_optinfo` of an
/// `RDMA2_OPTIONAL` message whose `rdma_opttype` is one of the `ROPT_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XchOp<'a> {
    /// `ROPT_INITXCH` (`optinfo_initxch`): the sender's characteristics.
    InitXch {
        /// `optixch_start`: the sender's characteristics.
        start: XcharSpec<'a>,
        /// `optixch_nochg`: elements of `start` not expected to change.
        nochg: XcharSubset<'a>,
    },
    /// `ROPT_REQXCH` (`optinfo_reqxch`): asks the receiver to change its
    /// characteristics.
    ReqXch {
        /// `optreqxch_want`: the values wanted.
        want: XcharSpec<'a>,
    },
    /// `ROPT_RESPXCH` (`optinfo_respxch`): the disposition of each element
    /// of the `ROPT_REQXCH` with the same XID.
    RespXch {
        /// `optrespxch_done`: changes made immediately.
        done: XcharSubset<'a>,
        /// `optrespxch_rej`: changes rejected.
        rej: XcharSubset<'a>,
        /// `optrespxch_pend`: changes to be reported by `ROPT_UPDXCH` later.
        pend: XcharSubset<'a>,
    },
    /// `ROPT_UPDXCH` (`optinfo_updxch`): a characteristic of the sender
    /// changed.
    UpdXch {
        /// `optupdxch_now`: the new value.
        now: Xchar<'a>,
        /// `optupdxch_pendclr`: a change request for this characteristic is
        /// no longer pending.
        pendclr: bool,
    },
}

impl<'a> XchOp<'a> {
    /// The `rdma_opttype` of this operation.
    pub const fn opttype(&self) -> u32 {
        match self {
            XchOp::InitXch { .. } => ROPT_INITXCH,
            XchOp::ReqXch { .. } => ROPT_REQXCH,
            XchOp::RespXch { .. } => ROPT_RESPXCH,
            XchOp::UpdXch { .. } => ROPT_UPDXCH,
        }
    }

    /// Decodes `optinfo` as the operation `opttype`. An `opttype` that is not
    /// one of this extension's yields [`XcharError::UnknownOperation`].
    pub fn decode(opttype: u32, optinfo: &'a [u8]) -> Result<Self, XcharError> {
        let mut r = XdrReader::new(optinfo);
        let op = match opttype {
            ROPT_INITXCH => XchOp::InitXch { start: XcharSpec::decode(&mut r)?, nochg: XcharSubset::decode(&mut r)? },
            ROPT_REQXCH => XchOp::ReqXch { want: XcharSpec::decode(&mut r)? },
            ROPT_RESPXCH => XchOp::RespXch {
                done: XcharSubset::decode(&mut r)?,
                rej: XcharSubset::decode(&mut r)?,
                pend: XcharSubset::decode(&mut r)?,
            },
            ROPT_UPDXCH => XchOp::UpdXch { now: Xchar::decode(&mut r)?, pendclr: r.bool()? },
            other => return Err(XcharError::UnknownOperation(other)),
        };
        match r.remaining() {
            0 => Ok(op),
            n => Err(XcharError::TrailingBytes(n)),
        }
    }

    /// Decodes the operation carried by a decoded `RDMA2_OPTIONAL` body.
    pub fn from_optional(opt: &Optional<'a>) -> Result<Self, XcharError> {
        Self::decode(opt.opttype, opt.optinfo)
    }

    /// Length of the encoded `rdma_optinfo` (always a multiple of 4).
    pub fn encoded_len(&self) -> usize {
        match self {
            XchOp::InitXch { start, nochg } => start.encoded_len().saturating_add(nochg.encoded_len()),
            XchOp::ReqXch { want } => want.encoded_len(),
            XchOp::RespXch { done, rej, pend } => {
                done.encoded_len().saturating_add(rej.encoded_len()).saturating_add(pend.encoded_len())
            }
            XchOp::UpdXch { now, .. } => now.encoded_len().saturating_add(4),
        }
    }

    fn encode_body(&self, w: &mut XdrWriter<'_>) -> Result<(), XcharError> {
        match self {
            XchOp::InitXch { start, nochg } => {
                start.encode(w)?;
                nochg.encode(w)
            }
            XchOp::ReqXch { want } => want.encode(w),
            XchOp::RespXch { done, rej, pend } => {
                done.encode(w)?;
                rej.encode(w)?;
                pend.encode(w)
            }
            XchOp::UpdXch { now, pendclr } => {
                now.encode(w)?;
                Ok(w.put_bool(*pendclr)?)
            }
        }
    }

    /// Encodes the `rdma_optinfo` into `out` and returns its length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, XcharError> {
        if self.encoded_len() > out.len() {
            return Err(XcharError::Xdr(XdrError::NoSpace));
        }
        let mut w = XdrWriter::new(out);
        self.encode_body(&mut w)?;
        Ok(w.len())
    }

    /// Encodes a complete Version Two `RDMA2_OPTIONAL` transport header
    /// carrying this operation and returns its length. No RPC payload
    /// follows, so per draft-rpcrdma-version-two section 4.2.2 `direction`
    /// is CALL when the sender acts as requester and REPLY when it acts as
    /// responder; an `ROPT_RESPXCH` must reuse the `ROPT_REQXCH`'s `xid`.
    pub fn encode_message(&self, xid: u32, credit: u32, direction: Direction, out: &mut [u8]) -> Result<usize, XcharError> {
        let body = self.encoded_len();
        let body32 = u32::try_from(body).map_err(|_| XcharError::Xdr(XdrError::NoSpace))?;
        if body.saturating_add(28) > out.len() {
            return Err(XcharError::Xdr(XdrError::NoSpace));
        }
        let mut w = XdrWriter::new(out);
        for v in [xid, RPCRDMA_VERSION_2, credit, RDMA2_OPTIONAL, direction.as_u32(), self.opttype(), body32] {
            w.put_u32(v)?;
        }
        self.encode_body(&mut w)?;
        Ok(w.len())
    }
}

/// A set of the characteristics this implementation knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KnownSet(u8);

impl KnownSet {
    /// The empty set.
    pub const EMPTY: KnownSet = KnownSet(0);

    const fn bit(id: u32) -> u8 {
        match id {
            XCHAR_RBSIZ => 1,
            XCHAR_REQREMINV => 2,
            XCHAR_BRS => 4,
            _ => 0,
        }
    }

    /// True if `id` is in the set.
    pub const fn contains(self, id: u32) -> bool {
        self.0 & Self::bit(id) != 0
    }

    /// Adds `id`; returns false (and does nothing) if `id` is not known.
    pub fn insert(&mut self, id: u32) -> bool {
        self.0 |= Self::bit(id);
        is_known_id(id)
    }

    /// Removes `id`.
    pub fn remove(&mut self, id: u32) {
        self.0 &= !Self::bit(id);
    }

    /// True if the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What [`Characteristics::apply`] did with one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The value differed and was stored.
    Changed,
    /// The value equals the one already held.
    Unchanged,
    /// Unknown characteristic: ignored (sections 2.1, 4.1).
    Unknown,
    /// Known characteristic with an unacceptable value: not stored.
    Invalid,
}

/// The transport characteristics of one endpoint, starting at the defaults
/// of Table 1. Used as "our view of the peer" (fed by [`Self::merge`]) or to
/// describe ourselves (see [`Self::as_xchars`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Characteristics {
    /// Receive Buffer Size: the largest message that may be sent to the
    /// endpoint inline.
    pub rbsiz: u32,
    /// Requester Remote Invalidation: Send With Invalidate may be used for
    /// replies to the endpoint.
    pub req_rem_inv: bool,
    /// Backward Request Support of the endpoint.
    pub brs: BkReqSup,
    /// Characteristics the endpoint declared not expected to change
    /// (`optixch_nochg` of its `ROPT_INITXCH`).
    pub fixed: KnownSet,
    /// Characteristics whose change we requested and the endpoint reported
    /// pending; cleared by `ROPT_UPDXCH` with `optupdxch_pendclr`.
    pub pending: KnownSet,
}

impl Default for Characteristics {
    fn default() -> Self {
        Characteristics::DEFAULT
    }
}

/// The result of a [`Characteristics::merge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MergeSummary {
    /// Known characteristics whose value changed (recompute thresholds etc.).
    pub changed: KnownSet,
    /// Known characteristics whose value was refused.
    pub invalid: KnownSet,
    /// Number of values with unknown ids that were ignored.
    pub unknown: u32,
    /// The first unknown id seen, for logging.
    pub first_unknown: Option<u32>,
    /// The message did not match its context: an `xcharsubset` named
    /// positions beyond its `xcharspec`, or an `ROPT_RESPXCH` left a
    /// requested element uncovered or in more than one of done/rej/pend
    /// (section 4.3). Such elements were not applied.
    pub inconsistent: bool,
}

impl MergeSummary {
    fn record(&mut self, x: &Xchar<'_>, a: Applied) {
        match a {
            Applied::Changed => {
                self.changed.insert(x.id());
            }
            Applied::Invalid => {
                self.invalid.insert(x.id());
            }
            Applied::Unknown => {
                self.unknown = self.unknown.saturating_add(1);
                if self.first_unknown.is_none() {
                    self.first_unknown = Some(x.id());
                }
            }
            Applied::Unchanged => {}
        }
    }
}

/// Why an operation could not be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeError {
    /// `ROPT_REQXCH` asks to change *our* characteristics; answer it with
    /// [`respond_to_request`] instead.
    NotAReport,
    /// `ROPT_RESPXCH` can only be interpreted against the `ROPT_REQXCH` it
    /// answers; none was given.
    NoPendingRequest,
}

impl Characteristics {
    /// The defaults of Table 1: 4096-byte receive buffers, no remote
    /// invalidation, inline backward requests; nothing fixed or pending.
    pub const DEFAULT: Characteristics = Characteristics {
        rbsiz: DEFAULT_RBSIZ,
        req_rem_inv: false,
        brs: BkReqSup::Inline,
        fixed: KnownSet::EMPTY,
        pending: KnownSet::EMPTY,
    };

    /// The three known characteristics as values, e.g. for our own
    /// `ROPT_INITXCH`.
    pub const fn as_xchars(&self) -> [Xchar<'static>; 3] {
        [Xchar::RecvBufSize(self.rbsiz), Xchar::ReqRemInv(self.req_rem_inv), Xchar::BackwardRequest(self.brs)]
    }

    /// Stores one value.
    pub fn apply(&mut self, x: &Xchar<'_>) -> Applied {
        fn set<T: PartialEq>(slot: &mut T, v: T) -> Applied {
            if *slot == v {
                Applied::Unchanged
            } else {
                *slot = v;
                Applied::Changed
            }
        }
        match *x {
            Xchar::RecvBufSize(v) if v < MIN_RBSIZ => Applied::Invalid,
            Xchar::RecvBufSize(v) => set(&mut self.rbsiz, v),
            Xchar::ReqRemInv(v) => set(&mut self.req_rem_inv, v),
            Xchar::BackwardRequest(v) => set(&mut self.brs, v),
            Xchar::Other { .. } => Applied::Unknown,
        }
    }

    /// Merges an operation received from the peer into this view of the peer.
    ///
    /// * `ROPT_INITXCH`: stores every known value, records `nochg` in
    ///   [`Self::fixed`]; unknown ids are counted and ignored (section 4.1).
    /// * `ROPT_RESPXCH`: needs `our_request`, the `optreqxch_want` of our
    ///   `ROPT_REQXCH` with the same XID. Done elements are stored, pending
    ///   ones recorded in [`Self::pending`], rejected ones dropped.
    /// * `ROPT_UPDXCH`: stores the value (the peer is authoritative about its
    ///   own characteristics, even ones it declared fixed); with `pendclr` the
    ///   characteristic is no longer pending.
    /// * `ROPT_REQXCH`: [`MergeError::NotAReport`].
    pub fn merge(&mut self, op: &XchOp<'_>, our_request: Option<&XcharSpec<'_>>) -> Result<MergeSummary, MergeError> {
        let mut s = MergeSummary::default();
        match op {
            XchOp::InitXch { start, nochg } => {
                // Positions from a bounded range: enumerate()'s counter would
                // carry an overflow check (and a panic) into this function.
                for (i, x) in (0..start.len()).zip(start.iter()) {
                    let a = self.apply(&x);
                    s.record(&x, a);
                    if nochg.contains(i) {
                        self.fixed.insert(x.id());
                    }
                }
                s.inconsistent = nochg.any_at_or_above(start.len());
            }
            XchOp::ReqXch { .. } => return Err(MergeError::NotAReport),
            XchOp::RespXch { done, rej, pend } => {
                let req = our_request.ok_or(MergeError::NoPendingRequest)?;
                for (i, x) in (0..req.len()).zip(req.iter()) {
                    match (done.contains(i), rej.contains(i), pend.contains(i)) {
                        (true, false, false) => {
                            self.pending.remove(x.id());
                            let a = self.apply(&x);
                            s.record(&x, a);
                        }
                        (false, true, false) => self.pending.remove(x.id()),
                        (false, false, true) => {
                            self.pending.insert(x.id());
                        }
                        _ => s.inconsistent = true,
                    }
                }
                let n = req.len();
                if done.any_at_or_above(n) || rej.any_at_or_above(n) || pend.any_at_or_above(n) {
                    s.inconsistent = true;
                }
            }
            XchOp::UpdXch { now, pendclr } => {
                let a = self.apply(now);
                s.record(now, a);
                if *pendclr {
                    self.pending.remove(now.id());
                }
            }
        }
        Ok(s)
    }
}

/// How a responder disposes of one requested change (see
/// [`respond_to_request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Changed immediately (`optrespxch_done`).
    Done,
    /// Refused (`optrespxch_rej`).
    Rejected,
    /// Will be changed later and reported by `ROPT_UPDXCH`
    /// (`optrespxch_pend`).
    Pending,
}

/// Builds the three bitmaps of an `ROPT_RESPXCH` answering a received
/// `ROPT_REQXCH` whose `optreqxch_want` is `want`.
///
/// `decide` is called for each known characteristic in order; unknown ones
/// are rejected without asking (section 4.3). The bitmaps are written to the
/// first words of `done`, `rej` and `pend`, and the number of words used is
/// returned, so `XcharSubset::from_words(&done[..n])` etc. form the reply.
/// Fails with `XdrError::NoSpace` if a slice has fewer than
/// `ceil(want.len() / 32)` words.
pub fn respond_to_request<F>(
    want: &XcharSpec<'_>,
    mut decide: F,
    done: &mut [u32],
    rej: &mut [u32],
    pend: &mut [u32],
) -> Result<usize, XcharError>
where
    F: FnMut(&Xchar<'_>) -> Disposition,
{
    let words = want.len().div_ceil(32);
    let no_space = XcharError::Xdr(XdrError::NoSpace);
    let (done, rej, pend) = match (done.get_mut(..words), rej.get_mut(..words), pend.get_mut(..words)) {
        (Some(d), Some(r), Some(p)) => (d, r, p),
        _ => return Err(no_space),
    };
    done.fill(0);
    rej.fill(0);
    pend.fill(0);
    for (i, x) in (0..want.len()).zip(want.iter()) {
        let d = if is_known_id(x.id()) { decide(&x) } else { Disposition::Rejected };
        let target = match d {
            Disposition::Done => &mut *done,
            Disposition::Rejected => &mut *rej,
            Disposition::Pending => &mut *pend,
        };
        if let Some(w) = target.get_mut(i / 32) {
            *w |= 1 << (i % 32);
        }
    }
    Ok(words)
}

/// Encodes the `ROPT_RESPXCH` with which an endpoint whose own
/// characteristics are `ours`, and never change, answers the `ROPT_REQXCH`
/// `want` (section 4.3): a request for a value it already has is done,
/// any other (and any unknown characteristic) is rejected. The message
/// takes the request's `xid`; `direction` is the answering side's.
/// Returns its length.
pub fn encode_fixed_response(
    want: &XcharSpec<'_>,
    ours: &Characteristics,
    xid: u32,
    credit: u32,
    direction: Direction,
    out: &mut [u8],
) -> Result<usize, XcharError> {
    const WORDS: usize = MAX_SUBSET_WORDS as usize;
    let (mut done, mut rej, mut pend) = ([0u32; WORDS], [0u32; WORDS], [0u32; WORDS]);
    let decide = |x: &Xchar<'_>| {
        let same = match *x {
            Xchar::RecvBufSize(v) => v == ours.rbsiz,
            Xchar::ReqRemInv(v) => v == ours.req_rem_inv,
            Xchar::BackwardRequest(v) => v == ours.brs,
            Xchar::Other { .. } => false,
        };
        if same {
            Disposition::Done
        } else {
            Disposition::Rejected
        }
    };
    let n = respond_to_request(want, decide, &mut done, &mut rej, &mut pend)?;
    let no_space = XcharError::Xdr(XdrError::NoSpace);
    let (Some(d), Some(r), Some(p)) = (done.get(..n), rej.get(..n), pend.get(..n)) else {
        return Err(no_space);
    };
    let resp = XchOp::RespXch { done: XcharSubset::from_words(d), rej: XcharSubset::from_words(r), pend: XcharSubset::from_words(p) };
    resp.encode_message(xid, credit, direction, out)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::testutil::{assert_encodes, mutated, Rng};
    use super::super::v2::{Body, Header};
    use super::*;
    use std::format;

    #[test]
    fn fixed_response_done_only_for_our_values() {
        let ours = Characteristics { rbsiz: 4096, req_rem_inv: false, ..Characteristics::DEFAULT };
        let want = [
            Xchar::RecvBufSize(4096),
            Xchar::RecvBufSize(8192),
            Xchar::ReqRemInv(true),
            Xchar::ReqRemInv(false),
            Xchar::BackwardRequest(BkReqSup::Inline),
        ];
        let mut out = [0u8; 256];
        let n = encode_fixed_response(&XcharSpec::from_slice(&want), &ours, 77, 32, Direction::Reply, &mut out).unwrap();
        let (h, rest) = Header::decode(&out[..n]).unwrap();
        assert!(rest.is_empty());
        assert_eq!((h.xid, h.credit), (77, 32));
        let Body::Optional(o) = h.body else { panic!("not OPTIONAL: {:?}", h.body) };
        assert_eq!(o.direction, Direction::Reply);
        let XchOp::RespXch { done, rej, pend } = XchOp::from_optional(&o).unwrap() else { panic!("not RESPXCH") };
        let bits = |s: XcharSubset<'_>| (0..want.len()).filter(|&i| s.contains(i)).collect::<std::vec::Vec<_>>();
        assert_eq!(bits(done), [0, 3, 4]);
        assert_eq!(bits(rej), [1, 2]);
        assert!(bits(pend).is_empty());
    }

    /// optinfo_initxch: RBSIZ 8192, REQREMINV true, experimental id
    /// 0xffffff00 with 3 bytes "xyz"; nochg = {0, 2}.
    const INITXCH: [u8; 48] = [
        0, 0, 0, 3, // xcharspec count
        0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0x20, 0, // RBSIZ = 8192
        0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 1, // REQREMINV = true
        0xff, 0xff, 0xff, 0, 0, 0, 0, 3, b'x', b'y', b'z', 0, // unknown
        0, 0, 0, 1, 0, 0, 0, 5, // nochg: one word, bits 0 and 2
    ];

    /// The same operation as a complete RDMA2_OPTIONAL message.
    const INITXCH_MSG: [u8; 76] = [
        0, 0, 0, 1, // xid
        0, 0, 0, 2, // vers
        0, 0, 0, 1, // credit
        0, 0, 0, 5, // RDMA2_OPTIONAL
        0, 0, 0, 0, // CALL
        0, 0, 0, 1, // ROPT_INITXCH
        0, 0, 0, 48, // optinfo length
        0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0x20, 0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0, 0, 0,
        0, 3, b'x', b'y', b'z', 0, 0, 0, 0, 1, 0, 0, 0, 5,
    ];

    /// optinfo_reqxch: want RBSIZ = 16384 and BRS = GENL.
    const REQXCH: [u8; 28] = [
        0, 0, 0, 2, // count
        0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0x40, 0, // RBSIZ 16384
        0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 2, // BRS GENL
    ];

    /// optinfo_respxch: done = {0}, rej = {}, pend = {1}.
    const RESPXCH: [u8; 20] = [
        0, 0, 0, 1, 0, 0, 0, 1, // done
        0, 0, 0, 0, // rej: no words
        0, 0, 0, 1, 0, 0, 0, 2, // pend
    ];

    /// optinfo_updxch: BRS = GENL, pendclr true.
    const UPDXCH: [u8; 16] = [0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 1];

    const VECTORS: [(u32, &[u8]); 4] =
        [(ROPT_INITXCH, &INITXCH), (ROPT_REQXCH, &REQXCH), (ROPT_RESPXCH, &RESPXCH), (ROPT_UPDXCH, &UPDXCH)];

    fn encode_eq(op: &XchOp<'_>, expect: &[u8]) {
        assert_encodes(op.encoded_len(), |out| op.encode(out), expect);
    }

    #[test]
    fn initxch_vector() {
        let op = XchOp::decode(ROPT_INITXCH, &INITXCH).unwrap();
        let XchOp::InitXch { start, nochg } = op else { panic!("{op:?}") };
        assert_eq!(start.len(), 3);
        let mut it = start.iter();
        assert_eq!(it.next(), Some(Xchar::RecvBufSize(8192)));
        assert_eq!(it.next(), Some(Xchar::ReqRemInv(true)));
        assert_eq!(it.next(), Some(Xchar::Other { id: 0xffff_ff00, data: b"xyz" }));
        assert_eq!(it.next(), None);
        assert!(is_experimental(0xffff_ff00) && !is_experimental(3));
        assert_eq!(start.unknown_ids().next(), Some(0xffff_ff00));
        assert_eq!(nochg.word_count(), 1);
        assert!(nochg.contains(0) && !nochg.contains(1) && nochg.contains(2) && !nochg.contains(33));
        assert_eq!(op.opttype(), ROPT_INITXCH);

        let vals = [Xchar::RecvBufSize(8192), Xchar::ReqRemInv(true), Xchar::Other { id: 0xffff_ff00, data: b"xyz" }];
        let native = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&[5]) };
        assert_eq!(native, op);
        encode_eq(&native, &INITXCH);
        encode_eq(&op, &INITXCH);

        // As a whole message, through the v2 decoder.
        let (h, payload) = Header::decode(&INITXCH_MSG).unwrap();
        assert!(payload.is_empty());
        let Body::Optional(opt) = h.body else { panic!() };
        assert_eq!((h.xid, h.credit, opt.direction, opt.opttype), (1, 1, Direction::Call, ROPT_INITXCH));
        assert_eq!(XchOp::from_optional(&opt), Ok(op));
        let mut out = [0u8; 128];
        assert_eq!(native.encode_message(1, 1, Direction::Call, &mut out), Ok(76));
        assert_eq!(&out[..76], &INITXCH_MSG);
        assert_eq!(native.encode_message(1, 1, Direction::Call, &mut out[..75]), Err(XcharError::Xdr(XdrError::NoSpace)));
    }

    #[test]
    fn reqxch_vector() {
        let op = XchOp::decode(ROPT_REQXCH, &REQXCH).unwrap();
        let vals = [Xchar::RecvBufSize(16384), Xchar::BackwardRequest(BkReqSup::General)];
        assert_eq!(op, XchOp::ReqXch { want: XcharSpec::from_slice(&vals) });
        let XchOp::ReqXch { want } = op else { panic!() };
        assert_eq!(want.iter().map(|x| x.id()).sum::<u32>(), 4);
        encode_eq(&op, &REQXCH);
    }

    #[test]
    fn respxch_vector() {
        let op = XchOp::decode(ROPT_RESPXCH, &RESPXCH).unwrap();
        let XchOp::RespXch { done, rej, pend } = op else { panic!() };
        assert!(done.contains(0) && !done.contains(1));
        assert_eq!(rej.word_count(), 0);
        assert!(!rej.contains(0) && !rej.contains(1));
        assert!(pend.contains(1) && !pend.contains(0));
        let native = XchOp::RespXch {
            done: XcharSubset::from_words(&[1]),
            rej: XcharSubset::empty(),
            pend: XcharSubset::from_words(&[2]),
        };
        assert_eq!(native, op);
        encode_eq(&native, &RESPXCH);
    }

    #[test]
    fn updxch_vector() {
        let op = XchOp::decode(ROPT_UPDXCH, &UPDXCH).unwrap();
        assert_eq!(op, XchOp::UpdXch { now: Xchar::BackwardRequest(BkReqSup::General), pendclr: true });
        encode_eq(&op, &UPDXCH);
        let mut v = UPDXCH;
        v[15] = 2;
        assert_eq!(XchOp::decode(ROPT_UPDXCH, &v), Err(XcharError::Xdr(XdrError::BadBool(2))));
    }

    #[test]
    fn truncation_at_every_offset_fails() {
        for (t, v) in VECTORS {
            for cut in 0..v.len() {
                let r = XchOp::decode(t, &v[..cut]);
                assert!(matches!(r, Err(XcharError::Xdr(XdrError::Truncated { .. }))), "op {t} cut {cut}: {r:?}");
            }
            assert!(XchOp::decode(t, v).is_ok());
        }
        for cut in 0..INITXCH_MSG.len() {
            assert!(Header::decode(&INITXCH_MSG[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn trailing_bytes_and_unknown_operations() {
        let mut v = [0u8; 20];
        v[..16].copy_from_slice(&UPDXCH);
        assert_eq!(XchOp::decode(ROPT_UPDXCH, &v), Err(XcharError::TrailingBytes(4)));
        for t in [0, 5, 0xffff_ffff] {
            let e = XchOp::decode(t, &UPDXCH).unwrap_err();
            assert_eq!(e, XcharError::UnknownOperation(t));
            assert_eq!(e.reply(), ErrorBody::InvalOption);
            assert!(!is_xchar_opttype(t));
        }
        assert_eq!(XcharError::TrailingBytes(1).reply(), ErrorBody::BadHeader);
    }

    #[test]
    fn known_characteristics_are_validated() {
        // REQREMINV = 2 is not a bool.
        let mut v = REQXCH;
        v[16..28].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 2]);
        assert_eq!(XchOp::decode(ROPT_REQXCH, &v), Err(XcharError::BadValue { id: XCHAR_REQREMINV }));
        // BRS = 3 is not a bkreqsup.
        let mut v = REQXCH;
        v[27] = 3;
        assert_eq!(XchOp::decode(ROPT_REQXCH, &v), Err(XcharError::BadValue { id: XCHAR_BRS }));
        // RBSIZ with 8 bytes of data.
        let bad = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x10, 0];
        assert_eq!(XchOp::decode(ROPT_REQXCH, &bad), Err(XcharError::BadValue { id: XCHAR_RBSIZ }));
        // RBSIZ with no data.
        let bad = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(XchOp::decode(ROPT_REQXCH, &bad), Err(XcharError::BadValue { id: XCHAR_RBSIZ }));
        // Unknown ids accept any data, including none.
        let ok = [0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0];
        assert_eq!(
            XchOp::decode(ROPT_REQXCH, &ok),
            Ok(XchOp::ReqXch { want: XcharSpec::from_slice(&[Xchar::Other { id: 9, data: &[] }]) })
        );
        // Encoders refuse Other with a known id.
        let vals = [Xchar::Other { id: XCHAR_BRS, data: &[0, 0, 0, 1] }];
        let op = XchOp::ReqXch { want: XcharSpec::from_slice(&vals) };
        assert_eq!(op.encode(&mut [0u8; 64]), Err(XcharError::BadValue { id: XCHAR_BRS }));
        assert_eq!(Xchar::from_parts(XCHAR_BRS, &[0, 0, 0, 0]), Ok(Xchar::BackwardRequest(BkReqSup::None)));
    }

    #[test]
    fn huge_counts_and_lengths_fail_fast() {
        let mut v = [0u8; 64];
        v[..4].copy_from_slice(&[0xff; 4]);
        assert_eq!(XchOp::decode(ROPT_REQXCH, &v), Err(XcharError::TooManyValues(u32::MAX)));
        // 200 elements need at least 1600 bytes: rejected before iterating.
        v[..4].copy_from_slice(&200u32.to_be_bytes());
        assert_eq!(XchOp::decode(ROPT_REQXCH, &v), Err(XcharError::Xdr(XdrError::Truncated { at: 4, need: 1600 })));
        // 257 is over the limit.
        v[..4].copy_from_slice(&257u32.to_be_bytes());
        assert_eq!(XchOp::decode(ROPT_REQXCH, &v), Err(XcharError::TooManyValues(257)));
        // xchv_data length 0xffffffff.
        let bad = [0, 0, 0, 1, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(matches!(XchOp::decode(ROPT_REQXCH, &bad), Err(XcharError::Xdr(XdrError::Truncated { .. }))));
        // Subsets: too many words, and a word count beyond the buffer.
        let bad = [0xff, 0xff, 0xff, 0xff];
        assert_eq!(XchOp::decode(ROPT_RESPXCH, &bad), Err(XcharError::SubsetTooLong(u32::MAX)));
        let bad = [0, 0, 0, 9];
        assert_eq!(XchOp::decode(ROPT_RESPXCH, &bad), Err(XcharError::SubsetTooLong(9)));
        let bad = [0, 0, 0, 8, 0, 0, 0, 0];
        assert!(matches!(XchOp::decode(ROPT_RESPXCH, &bad), Err(XcharError::Xdr(XdrError::Truncated { .. }))));
        // Limits exactly: 256 elements and 8 words are fine.
        let mut big = [0u8; 4 + 256 * 8 + 4 + 32];
        big[..4].copy_from_slice(&256u32.to_be_bytes());
        for i in 0..256 {
            big[4 + i * 8..8 + i * 8].copy_from_slice(&(100 + i as u32).to_be_bytes());
        }
        big[4 + 256 * 8..8 + 256 * 8].copy_from_slice(&8u32.to_be_bytes());
        let op = XchOp::decode(ROPT_INITXCH, &big).unwrap();
        let XchOp::InitXch { start, nochg } = op else { panic!() };
        assert_eq!((start.len(), start.unknown_ids().count(), nochg.word_count()), (256, 256, 8));
        let mut out = [0u8; 4096];
        assert_eq!(op.encode(&mut out), Ok(big.len()));
        assert_eq!(&out[..big.len()], &big[..]);
    }

    #[test]
    fn views_compare_and_print_by_elements() {
        let XchOp::InitXch { start, nochg } = XchOp::decode(ROPT_INITXCH, &INITXCH).unwrap() else { panic!() };
        let vals = [Xchar::RecvBufSize(8192), Xchar::ReqRemInv(true), Xchar::Other { id: 0xffff_ff00, data: b"xyz" }];
        assert_eq!(start, XcharSpec::from_slice(&vals));
        assert_ne!(start, XcharSpec::from_slice(&vals[..2]));
        assert_ne!(XcharSpec::from_slice(&vals[1..]), XcharSpec::from_slice(&vals[..2]));
        assert_eq!(nochg, XcharSubset::from_words(&[5]));
        assert_ne!(nochg, XcharSubset::from_words(&[5, 0]));
        assert_eq!(XcharSpec::default(), XcharSpec::empty());
        assert_eq!(XcharSubset::default(), XcharSubset::empty());
        assert_eq!(XcharSubset::default().words().next(), None);
        let spec = "[RecvBufSize(8192), ReqRemInv(true), Other { id: 4294967040, data: [120, 121, 122] }]";
        assert_eq!(format!("{start:?}"), spec);
        assert_eq!(format!("{:?}", XcharSpec::from_slice(&vals)), spec);
        assert_eq!(format!("{nochg:?}"), "[5]");
        assert_eq!(format!("{:?}", XcharSubset::empty()), "[]");
    }

    #[test]
    fn subset_bits() {
        let s = XcharSubset::from_words(&[0x8000_0001, 0, 0x10]);
        assert!(s.contains(0) && s.contains(31) && s.contains(68) && !s.contains(1) && !s.contains(32));
        assert!(!s.contains(usize::MAX));
        assert!(s.any_at_or_above(68) && !s.any_at_or_above(69) && s.any_at_or_above(31) && s.any_at_or_above(0));
        assert!(s.any_at_or_above(40) && !s.any_at_or_above(1000) && !s.any_at_or_above(usize::MAX));
        assert_eq!(s.word(99), 0);
        assert!(!XcharSubset::empty().any_at_or_above(0));
        let wire = XchOp::decode(ROPT_RESPXCH, &RESPXCH).unwrap();
        let XchOp::RespXch { pend, .. } = wire else { panic!() };
        assert!(pend.any_at_or_above(1) && !pend.any_at_or_above(2));
        assert_eq!(pend.word(0), 2);
        assert_eq!(pend.word(usize::MAX), 0);
    }

    #[test]
    fn any_at_or_above_matches_contains() {
        let words = [0x8000_0001, 0, 0x10, 0xffff_ffff, 0x4000_0000];
        for k in 0..=words.len() {
            let s = XcharSubset::from_words(&words[..k]);
            for n in 0..=32 * words.len() + 40 {
                let naive = (n..32 * k).any(|i| s.contains(i));
                assert_eq!(s.any_at_or_above(n), naive, "{k} words, n = {n}");
            }
        }
    }

    #[test]
    fn merge_initxch_and_unknowns() {
        let mut peer = Characteristics::default();
        assert_eq!((peer.rbsiz, peer.req_rem_inv, peer.brs), (4096, false, BkReqSup::Inline));
        let op = XchOp::decode(ROPT_INITXCH, &INITXCH).unwrap();
        let s = peer.merge(&op, None).unwrap();
        assert_eq!(peer.rbsiz, 8192);
        assert!(peer.req_rem_inv);
        assert_eq!(peer.brs, BkReqSup::Inline);
        assert!(s.changed.contains(XCHAR_RBSIZ) && s.changed.contains(XCHAR_REQREMINV) && !s.changed.contains(XCHAR_BRS));
        assert_eq!((s.unknown, s.first_unknown, s.inconsistent), (1, Some(0xffff_ff00), false));
        assert!(s.invalid.is_empty());
        assert!(peer.fixed.contains(XCHAR_RBSIZ) && !peer.fixed.contains(XCHAR_REQREMINV));
        // Merging again changes nothing.
        let s = peer.merge(&op, None).unwrap();
        assert!(s.changed.is_empty());
        // A too-small receive buffer is refused; bits past the spec are flagged.
        let vals = [Xchar::RecvBufSize(512), Xchar::BackwardRequest(BkReqSup::None)];
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&[4]) };
        let s = peer.merge(&op, None).unwrap();
        assert_eq!(peer.rbsiz, 8192);
        assert_eq!(peer.brs, BkReqSup::None);
        assert!(s.invalid.contains(XCHAR_RBSIZ) && s.changed.contains(XCHAR_BRS) && s.inconsistent);
        assert_eq!(peer.merge(&XchOp::ReqXch { want: XcharSpec::empty() }, None), Err(MergeError::NotAReport));
    }

    #[test]
    fn merge_request_response_update() {
        let mut peer = Characteristics::DEFAULT;
        let req = XchOp::decode(ROPT_REQXCH, &REQXCH).unwrap();
        let XchOp::ReqXch { want } = req else { panic!() };
        let resp = XchOp::decode(ROPT_RESPXCH, &RESPXCH).unwrap();
        assert_eq!(peer.merge(&resp, None), Err(MergeError::NoPendingRequest));
        let s = peer.merge(&resp, Some(&want)).unwrap();
        assert_eq!(peer.rbsiz, 16384, "done");
        assert_eq!(peer.brs, BkReqSup::Inline, "pending, not yet applied");
        assert!(peer.pending.contains(XCHAR_BRS) && !peer.pending.contains(XCHAR_RBSIZ));
        assert!(!s.inconsistent && s.changed.contains(XCHAR_RBSIZ));
        let upd = XchOp::decode(ROPT_UPDXCH, &UPDXCH).unwrap();
        let s = peer.merge(&upd, None).unwrap();
        assert_eq!(peer.brs, BkReqSup::General);
        assert!(peer.pending.is_empty() && s.changed.contains(XCHAR_BRS));

        // Overlapping and uncovered elements are not applied.
        let mut peer = Characteristics::DEFAULT;
        let bad = XchOp::RespXch {
            done: XcharSubset::from_words(&[1]),
            rej: XcharSubset::from_words(&[1]),
            pend: XcharSubset::from_words(&[0]),
        };
        let s = peer.merge(&bad, Some(&want)).unwrap();
        assert!(s.inconsistent);
        assert_eq!(peer, Characteristics::DEFAULT);
        let beyond =
            XchOp::RespXch { done: XcharSubset::from_words(&[3]), rej: XcharSubset::from_words(&[4]), pend: XcharSubset::empty() };
        let s = peer.merge(&beyond, Some(&want)).unwrap();
        assert!(s.inconsistent);
        assert_eq!(peer.rbsiz, 16384);
    }

    #[test]
    fn responding_to_requests() {
        let vals = [
            Xchar::RecvBufSize(65536),
            Xchar::Other { id: 77, data: &[1] },
            Xchar::ReqRemInv(true),
            Xchar::BackwardRequest(BkReqSup::General),
        ];
        let want = XcharSpec::from_slice(&vals);
        let (mut done, mut rej, mut pend) = ([0xffff_ffffu32; 2], [7u32; 2], [9u32; 2]);
        let mut asked = 0;
        let n = respond_to_request(
            &want,
            |x| {
                asked += 1;
                match x {
                    Xchar::RecvBufSize(_) => Disposition::Pending,
                    Xchar::ReqRemInv(_) => Disposition::Done,
                    _ => Disposition::Rejected,
                }
            },
            &mut done,
            &mut rej,
            &mut pend,
        )
        .unwrap();
        assert_eq!((n, asked), (1, 3), "unknown id rejected without asking");
        assert_eq!((done[0], rej[0], pend[0]), (0b0100, 0b1010, 0b0001));
        let op = XchOp::RespXch {
            done: XcharSubset::from_words(&done[..n]),
            rej: XcharSubset::from_words(&rej[..n]),
            pend: XcharSubset::from_words(&pend[..n]),
        };
        let mut peer = Characteristics::DEFAULT;
        let s = peer.merge(&op, Some(&want)).unwrap();
        assert!(!s.inconsistent && peer.req_rem_inv && peer.pending.contains(XCHAR_RBSIZ));
        assert_eq!(respond_to_request(&want, |_| Disposition::Done, &mut [], &mut rej, &mut pend), Err(XcharError::Xdr(XdrError::NoSpace)));
        assert_eq!(respond_to_request(&XcharSpec::empty(), |_| Disposition::Done, &mut [], &mut [], &mut []), Ok(0));
        // Our own INITXCH from a Characteristics.
        let me = Characteristics { rbsiz: 8192, ..Characteristics::DEFAULT };
        let vals = me.as_xchars();
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&[0b010]) };
        let mut buf = [0u8; 64];
        let len = op.encode(&mut buf).unwrap();
        let mut peer = Characteristics::DEFAULT;
        peer.merge(&XchOp::decode(ROPT_INITXCH, &buf[..len]).unwrap(), None).unwrap();
        assert_eq!(peer.rbsiz, 8192);
        assert!(peer.fixed.contains(XCHAR_REQREMINV));
        let mut k = KnownSet::EMPTY;
        assert!(k.insert(XCHAR_BRS) && !k.insert(99) && k.contains(XCHAR_BRS) && !k.contains(99));
    }

    // ---- Randomized round trips and mutation fuzzing ----

    fn random_xchar<'a>(rng: &mut Rng, data: &'a [u8]) -> Xchar<'a> {
        match rng.below(5) {
            0 => Xchar::RecvBufSize(rng.u32()),
            1 => Xchar::ReqRemInv(rng.below(2) == 1),
            2 => Xchar::BackwardRequest(BkReqSup::from_u32(rng.below(3) as u32).unwrap()),
            _ => Xchar::Other { id: rng.u32() | 0x100, data: &data[..rng.below(data.len() as u64 + 1) as usize] },
        }
    }

    #[test]
    fn round_trips_over_many_shapes() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let data = [0xa5u8; 13];
        let mut out = [0u8; 2048];
        let mut msg = [0u8; 2048];
        for _ in 0..3000 {
            let mut vals = [Xchar::RecvBufSize(0); 40];
            for v in vals.iter_mut() {
                *v = random_xchar(&mut rng, &data);
            }
            let mut words = [0u32; 9];
            for w in words.iter_mut() {
                *w = rng.u32();
            }
            let spec = XcharSpec::from_slice(&vals[..rng.below(41) as usize]);
            let sub = |rng: &mut Rng| {
                let a = rng.below(9) as usize;
                let b = a + rng.below(9 - a as u64) as usize;
                XcharSubset::from_words(&words[a..b])
            };
            let op = match rng.below(4) {
                0 => XchOp::InitXch { start: spec, nochg: sub(&mut rng) },
                1 => XchOp::ReqXch { want: spec },
                2 => XchOp::RespXch { done: sub(&mut rng), rej: sub(&mut rng), pend: sub(&mut rng) },
                _ => XchOp::UpdXch { now: random_xchar(&mut rng, &data), pendclr: rng.below(2) == 0 },
            };
            let n = op.encode(&mut out).unwrap();
            assert_eq!(n, op.encoded_len());
            assert_eq!(n % 4, 0);
            let d = XchOp::decode(op.opttype(), &out[..n]).unwrap();
            assert_eq!(d, op);
            // Through a whole v2 message.
            let dir = if rng.below(2) == 0 { Direction::Call } else { Direction::Reply };
            let m = op.encode_message(rng.u32(), rng.u32(), dir, &mut msg).unwrap();
            assert_eq!(m, n + 28);
            let (h, rest) = Header::decode(&msg[..m]).unwrap();
            assert!(rest.is_empty());
            let Body::Optional(opt) = h.body else { panic!() };
            assert_eq!(opt.direction, dir);
            assert_eq!(XchOp::from_optional(&opt), Ok(op));
            let mut peer = Characteristics::DEFAULT;
            let _ = peer.merge(&d, Some(&spec));
        }
    }

    const INTERESTING: [u32; 8] = [0, 1, 2, 3, 4, 8, 0x7fff_ffff, 0xffff_ffff];

    #[test]
    fn mutation_fuzz_never_panics_and_reencodes() {
        let mut rng = Rng(0x0bad_5eed_dead_beef);
        let mut buf = [0u8; 512];
        let mut out = [0u8; 1024];
        let mut again = [0u8; 1024];
        let want = XcharSpec::from_slice(&[Xchar::RecvBufSize(1 << 20), Xchar::ReqRemInv(true)]);
        let mut ok = 0u32;
        for iter in 0..40_000u32 {
            let whole = iter % 5 == 4;
            let (t, v): (u32, &[u8]) = if whole { (0, &INITXCH_MSG) } else { VECTORS[(iter % 4) as usize] };
            let input = mutated(&mut rng, &mut buf, v, &INTERESTING);
            let decoded = if whole {
                match Header::decode(input) {
                    Ok((Header { body: Body::Optional(opt), .. }, _)) => XchOp::from_optional(&opt),
                    _ => continue,
                }
            } else {
                XchOp::decode(if rng.below(8) == 0 { rng.below(6) as u32 } else { t }, input)
            };
            let Ok(op) = decoded else { continue };
            ok += 1;
            let n = op.encode(&mut out).unwrap();
            assert_eq!(n, op.encoded_len());
            let op2 = XchOp::decode(op.opttype(), &out[..n]).unwrap();
            assert_eq!(op2, op);
            assert_eq!(op2.encode(&mut again), Ok(n));
            assert_eq!(&again[..n], &out[..n]);
            let mut peer = Characteristics::DEFAULT;
            let _ = peer.merge(&op, Some(&want));
            assert!(peer.rbsiz >= MIN_RBSIZ);
        }
        assert!(ok > 1000, "mutations should still often decode: {ok}");
    }
}
