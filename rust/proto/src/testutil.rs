// SPDX-License-Identifier: GPL-2.0
//! Helpers shared by the unit tests of several modules: a deterministic PRNG,
//! word-aware mutation of encoded messages, and an encoder check.
//!
//! Compiled for `cargo test` only (declared under `cfg(test)` in `lib.rs`);
//! the kernel never builds the tests, so nothing here is part of the module.

use core::fmt::Debug;

/// A xorshift64 generator: deterministic test input with no dependencies.
///
/// The seed must not be zero (zero stays zero).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next 64-bit output.
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..n` (`n` must not be zero).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Bits 16 to 47 of the next output.
    pub(crate) fn u32(&mut self) -> u32 {
        (self.next() >> 16) as u32
    }

    /// The low 32 bits of the next output.
    pub(crate) fn low_u32(&mut self) -> u32 {
        self.next() as u32
    }
}

/// Copies `seed` into `buf`, applies one to four [`mutate`]s and returns the
/// mutated input.
pub(crate) fn mutated<'b>(rng: &mut Rng, buf: &'b mut [u8], seed: &[u8], interesting: &[u32; 8]) -> &'b [u8] {
    buf[..seed.len()].copy_from_slice(seed);
    let mut len = seed.len();
    for _ in 0..1 + rng.below(4) {
        len = mutate(rng, buf, len, interesting);
    }
    &buf[..len]
}

/// Applies one random mutation to the XDR message `buf[..len]` and returns
/// its new length: flip a bit, truncate, insert an `interesting` word at a
/// word boundary, delete a word, overwrite a word (with an `interesting` or
/// a random value), or insert a random byte. Growing stops at `buf.len()`.
fn mutate(rng: &mut Rng, buf: &mut [u8], len: usize, interesting: &[u32; 8]) -> usize {
    match rng.below(6) {
        0 if len > 0 => {
            let i = rng.below(len as u64) as usize;
            buf[i] ^= 1 << rng.below(8);
            len
        }
        1 => rng.below(len as u64 + 1) as usize,
        2 if len + 4 <= buf.len() => {
            let at = (rng.below(len as u64 / 4 + 1) * 4) as usize;
            buf.copy_within(at..len, at + 4);
            let w = interesting[rng.below(8) as usize];
            buf[at..at + 4].copy_from_slice(&w.to_be_bytes());
            len + 4
        }
        3 if len >= 4 => {
            let at = (rng.below(len as u64 / 4) * 4) as usize;
            buf.copy_within(at + 4..len, at);
            len - 4
        }
        4 if len >= 4 => {
            let at = (rng.below(len as u64 / 4) * 4) as usize;
            let w = if rng.below(2) == 0 { interesting[rng.below(8) as usize] } else { rng.u32() };
            buf[at..at + 4].copy_from_slice(&w.to_be_bytes());
            len
        }
        _ => {
            let i = rng.below(len as u64 + 1) as usize;
            if len < buf.len() {
                buf.copy_within(i..len, i + 1);
                buf[i] = rng.u32() as u8;
                len + 1
            } else {
                len
            }
        }
    }
}

/// Runs an encoder on a 256-byte buffer and checks that it reports
/// `encoded_len` bytes written and that they are `expect`.
pub(crate) fn assert_encodes<E: Debug>(
    encoded_len: usize,
    encode: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    expect: &[u8],
) {
    let mut out = [0u8; 256];
    let n = encode(&mut out).unwrap();
    assert_eq!(n, encoded_len);
    assert_eq!(&out[..n], expect);
}
