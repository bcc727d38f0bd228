// SPDX-License-Identifier: GPL-2.0
//! XDR (RFC 4506) primitives over borrowed byte slices.
//!
//! [`XdrReader`] decodes from untrusted input and never reads past its slice;
//! [`XdrWriter`] encodes into a caller-provided buffer and never writes past
//! it. Neither allocates.

/// An XDR decode or encode failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdrError {
    /// The input ended early: `need` more bytes were required at byte offset `at`.
    Truncated {
        /// Offset into the input where the read started.
        at: usize,
        /// Bytes required from that offset.
        need: usize,
    },
    /// A variable-length item declared a length larger than its bound.
    TooLong {
        /// Length found on the wire.
        len: u32,
        /// Largest length allowed.
        max: u32,
    },
    /// A boolean was neither 0 nor 1.
    BadBool(u32),
    /// The output buffer is too small for the item being encoded.
    NoSpace,
}

/// Rounds `len` up to the next multiple of four (XDR alignment).
///
/// Exact for every length a buffer can have (at most `isize::MAX`); a `len`
/// above `usize::MAX - 3` saturates to the largest multiple of four instead
/// of overflowing.
pub const fn align4(len: usize) -> usize {
    len.saturating_add(3) & !3
}

/// Number of zero bytes that pad an item of `len` bytes to XDR alignment.
pub const fn pad4(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// A cursor decoding XDR items from an untrusted byte slice.
#[derive(Debug, Clone)]
pub struct XdrReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrReader<'a> {
    /// Starts decoding at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Byte offset of the next item.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.rest().len()
    }

    /// The bytes not yet consumed, without consuming them.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        // `pos` never passes the end of `buf`, so this is never the default.
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Consumes exactly `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let truncated = XdrError::Truncated { at: self.pos, need: n };
        let end = self.pos.checked_add(n).ok_or(truncated)?;
        let out = self.buf.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// Consumes exactly `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], XdrError> {
        let at = self.pos;
        self.take(N)?.first_chunk().ok_or(XdrError::Truncated { at, need: N })
    }

    /// Decodes an unsigned 32-bit integer.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, XdrError> {
        Ok(u32::from_be_bytes(*self.array()?))
    }

    /// Decodes an unsigned 64-bit hyper integer.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, XdrError> {
        let hi = u64::from(self.u32()?);
        let lo = u64::from(self.u32()?);
        Ok(hi << 32 | lo)
    }

    /// Decodes a boolean (0 or 1; anything else is an error).
    #[inline]
    pub fn bool(&mut self) -> Result<bool, XdrError> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(XdrError::BadBool(v)),
        }
    }

    /// Decodes fixed-length opaque data of `n` bytes plus its padding.
    pub fn opaque_fixed(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let start = self.pos;
        let padded = n.checked_add(3).map(|v| v & !3).ok_or(XdrError::Truncated { at: start, need: n })?;
        let truncated = XdrError::Truncated { at: start, need: padded };
        let all = self.take(padded).map_err(|_| truncated)?;
        all.get(..n).ok_or(truncated)
    }

    /// Decodes variable-length opaque data whose length must not exceed `max`.
    pub fn opaque_var(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        let start = self.pos;
        let len = self.u32()?;
        if len > max {
            self.pos = start;
            return Err(XdrError::TooLong { len, max });
        }
        self.opaque_fixed(len as usize).inspect_err(|_| self.pos = start)
    }
}

/// A cursor encoding XDR items into a caller-provided buffer.
#[derive(Debug)]
pub struct XdrWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> XdrWriter<'a> {
    /// Starts encoding at the beginning of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// True if nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        // `pos` never passes the end of `buf`, so this is never the default.
        self.buf.get(..self.pos).unwrap_or_default()
    }

    /// Bytes still free in the buffer.
    fn room(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Reserves `n` bytes and returns them for the caller to fill.
    #[inline]
    pub fn reserve(&mut self, n: usize) -> Result<&mut [u8], XdrError> {
        let end = self.pos.checked_add(n).ok_or(XdrError::NoSpace)?;
        let out = self.buf.get_mut(self.pos..end).ok_or(XdrError::NoSpace)?;
        self.pos = end;
        Ok(out)
    }

    /// Appends `data` as it is: bytes that are already XDR (no length word,
    /// no padding added).
    pub fn put_bytes(&mut self, data: &[u8]) -> Result<(), XdrError> {
        copy(self.reserve(data.len())?, data);
        Ok(())
    }

    /// Encodes an unsigned 32-bit integer.
    #[inline]
    pub fn put_u32(&mut self, v: u32) -> Result<(), XdrError> {
        // A fixed-size store: headers are mostly 32-bit words, written on
        // every call.
        let out: &mut [u8; 4] = self.reserve(4)?.try_into().map_err(|_| XdrError::NoSpace)?;
        *out = v.to_be_bytes();
        Ok(())
    }

    /// Encodes an unsigned 64-bit hyper integer.
    #[inline]
    pub fn put_u64(&mut self, v: u64) -> Result<(), XdrError> {
        let out: &mut [u8; 8] = self.reserve(8)?.try_into().map_err(|_| XdrError::NoSpace)?;
        *out = v.to_be_bytes();
        Ok(())
    }

    /// Encodes a boolean.
    pub fn put_bool(&mut self, v: bool) -> Result<(), XdrError> {
        self.put_u32(u32::from(v))
    }

    /// Encodes fixed-length opaque data plus zero padding.
    pub fn put_opaque_fixed(&mut self, data: &[u8]) -> Result<(), XdrError> {
        let out = self.reserve(align4(data.len()))?;
        // `reserve` gave `align4(len) >= len` bytes; written as two `get`s
        // because `split_at_mut_checked` needs rustc 1.80 (the kernel's
        // minimum is 1.78).
        let n = data.len();
        copy(out.get_mut(..n).ok_or(XdrError::NoSpace)?, data);
        out.get_mut(n..).ok_or(XdrError::NoSpace)?.fill(0);
        Ok(())
    }

    /// Encodes variable-length opaque data (length word, bytes, padding).
    pub fn put_opaque_var(&mut self, data: &[u8]) -> Result<(), XdrError> {
        let len = u32::try_from(data.len()).map_err(|_| XdrError::NoSpace)?;
        if align4(data.len()).saturating_add(4) > self.room() {
            return Err(XdrError::NoSpace);
        }
        self.put_u32(len)?;
        self.put_opaque_fixed(data)
    }
}

/// XDR words stored into a buffer sized for exactly them beforehand.
///
/// The encoder of a header it has just measured: one slice split per word
/// and no `Result` per word, where [`XdrWriter`] checks its room and
/// returns an error for each. A word that does not fit is dropped and
/// [`Words::finish`] reports it, as it does room left unwritten: either
/// means the measurement was wrong, and the bytes must not be sent.
#[derive(Debug)]
pub struct Words<'a> {
    rest: &'a mut [u8],
    short: bool,
}

impl<'a> Words<'a> {
    /// Starts storing at the beginning of `buf`, which the caller sized.
    #[inline(always)]
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { rest: buf, short: false }
    }

    /// Stores `N` bytes.
    #[inline(always)]
    fn put<const N: usize>(&mut self, bytes: [u8; N]) {
        match core::mem::take(&mut self.rest).split_first_chunk_mut::<N>() {
            Some((word, rest)) => {
                *word = bytes;
                self.rest = rest;
            }
            None => self.short = true,
        }
    }

    /// Stores an unsigned 32-bit integer.
    #[inline(always)]
    pub fn u32(&mut self, v: u32) {
        self.put(v.to_be_bytes());
    }

    /// Stores an unsigned 64-bit hyper integer.
    #[inline(always)]
    pub fn u64(&mut self, v: u64) {
        self.put(v.to_be_bytes());
    }

    /// Succeeds if every word fitted and the buffer is full.
    #[inline(always)]
    pub fn finish(self) -> Result<(), XdrError> {
        if self.short || !self.rest.is_empty() {
            return Err(XdrError::NoSpace);
        }
        Ok(())
    }
}

/// Copies `src` into `dst`, whose callers make both the same length.
///
/// `copy_from_slice` (one `memcpy`) behind an explicit length test, so
/// that no length-mismatch panic is left where the optimizer cannot see
/// the lengths agree; a mismatch copies nothing.
#[inline]
fn copy(dst: &mut [u8], src: &[u8]) {
    if dst.len() == src.len() {
        dst.copy_from_slice(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip_big_endian() {
        let mut buf = [0u8; 16];
        let mut w = XdrWriter::new(&mut buf);
        w.put_u32(0x0102_0304).unwrap();
        w.put_u64(0x1122_3344_5566_7788).unwrap();
        w.put_bool(true).unwrap();
        assert_eq!(w.len(), 16);
        assert_eq!(buf, [1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0, 0, 1]);
        let mut r = XdrReader::new(&buf);
        assert_eq!(r.u32(), Ok(0x0102_0304));
        assert_eq!(r.u64(), Ok(0x1122_3344_5566_7788));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.u32(), Err(XdrError::Truncated { at: 16, need: 4 }));
    }

    #[test]
    fn opaque_is_padded_and_bounded() {
        let mut buf = [0xffu8; 12];
        let mut w = XdrWriter::new(&mut buf);
        w.put_opaque_var(b"abcde").unwrap();
        assert_eq!(w.len(), 12);
        assert_eq!(&buf, b"\0\0\0\x05abcde\0\0\0");
        assert_eq!(XdrReader::new(&buf).opaque_var(5), Ok(&b"abcde"[..]));
        let mut r = XdrReader::new(&buf);
        assert_eq!(r.opaque_var(4), Err(XdrError::TooLong { len: 5, max: 4 }));
        assert_eq!(r.position(), 0, "a failed decode consumes nothing");
        assert_eq!(XdrReader::new(&buf[..11]).opaque_var(5), Err(XdrError::Truncated { at: 4, need: 8 }));
    }

    #[test]
    fn huge_lengths_do_not_overflow() {
        let buf = [0xff, 0xff, 0xff, 0xff];
        assert!(XdrReader::new(&buf).opaque_var(u32::MAX).is_err());
        assert_eq!(XdrReader::new(&buf).opaque_fixed(usize::MAX).map(|_| ()), Err(XdrError::Truncated { at: 0, need: usize::MAX }));
    }

    #[test]
    fn bad_bool_and_no_space() {
        assert_eq!(XdrReader::new(&[0, 0, 0, 2]).bool(), Err(XdrError::BadBool(2)));
        let mut small = [0u8; 3];
        assert_eq!(XdrWriter::new(&mut small).put_u32(1), Err(XdrError::NoSpace));
        let mut six = [0u8; 6];
        let mut w = XdrWriter::new(&mut six);
        assert_eq!(w.put_opaque_var(b"ab"), Err(XdrError::NoSpace));
        assert!(w.is_empty(), "a failed encode writes nothing");
    }

    #[test]
    fn words_fill_a_measured_buffer() {
        let mut buf = [0u8; 12];
        let mut w = Words::new(&mut buf);
        w.u32(0x0102_0304);
        w.u64(0x1122_3344_5566_7788);
        assert_eq!(w.finish(), Ok(()));
        assert_eq!(buf, [1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        // Too small: the word that does not fit is dropped and reported.
        let mut small = [0xffu8; 6];
        let mut w = Words::new(&mut small);
        w.u32(7);
        w.u32(8);
        assert_eq!(w.finish(), Err(XdrError::NoSpace));
        assert_eq!(small, [0, 0, 0, 7, 0xff, 0xff]);
        // Too large: room left over is a wrong measurement too.
        let mut large = [0u8; 8];
        let mut w = Words::new(&mut large);
        w.u32(7);
        assert_eq!(w.finish(), Err(XdrError::NoSpace));
        let mut w = Words::new(&mut large);
        w.u64(1);
        assert_eq!(w.finish(), Ok(()));
    }

    #[test]
    fn alignment() {
        for len in 0..64usize {
            assert_eq!(align4(len), len.div_ceil(4) * 4);
            assert_eq!(pad4(len), align4(len) - len);
        }
        assert_eq!(align4(usize::MAX - 3), usize::MAX - 3);
        assert_eq!(align4(usize::MAX), usize::MAX - 3, "saturates");
        assert_eq!(pad4(usize::MAX), 1);
    }
}
