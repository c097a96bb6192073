//! In-store taps: the round-1 engines (sketch, corr, crc) run over a handle, beside its pages.
//!
//! A tap sees a handle's bytes once, in order, and returns a small result: a sketch summary,
//! correlation statistics, a CRC. The bytes never leave the store.
//!
//! - `crc` is built in: [`Crc`] is a [`Kernel`] whose lanes each take a contiguous range of
//!   pages and whose partials combine CRC-32s in lane order, so any lane count gives the CRC of
//!   the whole handle (the same as `crc32fast::hash` of the bytes, or `zlib.crc32`).
//! - `sketch` and `corr` come from `inpath-taps` (the same taps `inpath wire --tap` runs on a
//!   connection): [`remote::Service`](crate::remote::Service) parses the specification with
//!   `inpath_taps::parse_tap` and feeds the tap a [`HandleReader`]: the handle's bytes in
//!   order, read ahead by the [`FlashReader`]'s workers.

use crate::error::Result;
use crate::kernel::{Flow, Kernel, Partial, Scan};
use crate::reader::{Chunk, FlashReader, Port};
use crate::store::OpenHandle;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::ops::Range;
use std::sync::Arc;

/// A handle's bytes, `offset..offset+length`, as a [`Read`]: one in-order port of a
/// [`FlashReader`], whose workers read ahead.
pub struct HandleReader<'r> {
    port: Port<'r>,
    /// The chunk being handed out (its buffer goes back to the reader's pool when dropped).
    chunk: Option<Chunk>,
    at: usize,
    bytes: u64,
    pages: u64,
}

impl<'r> HandleReader<'r> {
    /// Reads `length` bytes at `offset` of `handle` through `reader`.
    pub fn new(
        reader: &'r FlashReader,
        handle: &Arc<OpenHandle>,
        offset: u64,
        length: u64,
    ) -> Result<HandleReader<'r>> {
        Ok(HandleReader {
            port: reader.request(handle, offset, length)?,
            chunk: None,
            at: 0,
            bytes: 0,
            pages: 0,
        })
    }

    /// Bytes handed out so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Pages read so far.
    pub fn pages_read(&self) -> u64 {
        self.pages
    }
}

impl Read for HandleReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.as_ref().map_or(0, |c| c.bytes().len()) {
            match self.port.next_chunk() {
                None => return Ok(0),
                Some(Ok(chunk)) => {
                    self.pages += chunk.pages;
                    self.chunk = Some(chunk);
                    self.at = 0;
                }
                // A damaged page or a failed read: the tap's input ends with an error, which
                // names the page (never a silently short input).
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let bytes = self.chunk.as_ref().map_or(&[][..], Chunk::bytes);
        let n = buf.len().min(bytes.len() - self.at);
        buf[..n].copy_from_slice(&bytes[self.at..self.at + n]);
        self.at += n;
        self.bytes += n as u64;
        Ok(n)
    }
}

/// The `crc` tap as a kernel: bytes and CRC-32 (IEEE, as zlib's `crc32`) of a handle.
#[derive(Clone, Copy, Debug, Default)]
pub struct Crc;

/// Bytes and CRC-32 of a contiguous range; merges with the range right after it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrcPartial {
    /// Bytes covered.
    pub bytes: u64,
    /// Their CRC-32.
    pub crc32: u32,
}

impl Partial for CrcPartial {
    fn merge(self, later: CrcPartial) -> CrcPartial {
        let mut h = crc32fast::Hasher::new_with_initial_len(self.crc32, self.bytes);
        h.combine(&crc32fast::Hasher::new_with_initial_len(
            later.crc32,
            later.bytes,
        ));
        CrcPartial {
            bytes: self.bytes + later.bytes,
            crc32: h.finalize(),
        }
    }
}

/// A lane of [`Crc`].
pub struct CrcScan {
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl Scan for CrcScan {
    type Partial = CrcPartial;

    fn feed(&mut self, _offset: u64, bytes: &[u8]) -> Flow {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        Flow::More
    }

    fn finish(self) -> CrcPartial {
        CrcPartial {
            bytes: self.bytes,
            crc32: self.hasher.finalize(),
        }
    }
}

impl Kernel for Crc {
    type Partial = CrcPartial;
    type Scan = CrcScan;

    fn reach(&self, own: Range<u64>, _size: u64) -> Range<u64> {
        own
    }

    fn scan(&self, _own: Range<u64>, _size: u64) -> CrcScan {
        CrcScan {
            hasher: crc32fast::Hasher::new(),
            bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::run_slice;

    #[test]
    fn crc_of_any_lane_count_is_the_crc_of_the_bytes() {
        let bytes: Vec<u8> = (0..100_003u32).map(|i| (i * 2654435761) as u8).collect();
        let want = crc32fast::hash(&bytes);
        for lanes in 1..7 {
            for chunk in [1usize, 100, 8192, 1 << 20] {
                let got = run_slice(&bytes, &Crc, lanes, 4096, chunk);
                assert_eq!(got.crc32, want, "lanes {lanes}, chunk {chunk}");
                assert_eq!(got.bytes, bytes.len() as u64);
            }
        }
        assert_eq!(run_slice(&[], &Crc, 3, 4096, 10), CrcPartial::default());
    }

    #[test]
    fn crc_merge_is_associative() {
        let p = |s: &[u8]| CrcPartial {
            bytes: s.len() as u64,
            crc32: crc32fast::hash(s),
        };
        let (a, b, c) = (p(b"abc"), p(b""), p(b"defgh"));
        assert_eq!(
            a.clone().merge(b.clone()).merge(c.clone()),
            a.merge(b.merge(c))
        );
        assert_eq!(p(b"abc").merge(p(b"defgh")), p(b"abcdefgh"));
    }
}
