//! Streaming compressors and decompressors in standard formats: gzip (RFC 1952), zlib
//! (RFC 1950), raw DEFLATE (RFC 1951), the LZ4 frame format, the Snappy framing format and Zstd
//! (RFC 8878).
//!
//! Push input in chunks of any size and take the output as it comes (the Vitis compression
//! library's push/pop API, without its worker thread: the work happens inside `push`). The
//! output never depends on how the input was cut. Decompressors accept every valid input of
//! their format: multi-member gzip and every gzip header flag, LZ4 linked or independent blocks
//! with or without block and content checksums, content sizes and skippable frames,
//! concatenated LZ4 and Zstd frames, Snappy padding and skippable chunks.
//!
//! The entropy coders are libraries (`flate2` on `zlib-rs`, `lz4_flex`, `snap`, `zstd`); this
//! module owns the framing: gzip headers and trailers, LZ4 frame parsing, Snappy chunks with
//! their masked CRC-32C, and the checks that a stream ended where its format allows.
//!
//! ```
//! use inpath_seal::codec::{Compressor, Decompressor, Format};
//! let text = b"to be or not to be, that is the question; ".repeat(100);
//! let mut packed = Vec::new();
//! let mut c = Compressor::new(Format::Gzip, None)?;
//! for chunk in text.chunks(7) {
//!     c.push(chunk, &mut packed)?;
//! }
//! c.finish(&mut packed)?;
//! let mut d = Decompressor::new(Format::Gzip);
//! let mut back = Vec::new();
//! d.push(&packed, &mut back)?;
//! d.finish(&mut back)?;
//! assert_eq!(back, text);
//! # Ok::<(), inpath_seal::Error>(())
//! ```

mod deflate;
mod lz4;
mod snappy;
mod zstd;

use crate::error::{Error, Result};

/// A compressed stream format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// gzip (RFC 1952): DEFLATE with a header and a CRC-32 trailer; members may be concatenated.
    Gzip,
    /// zlib (RFC 1950): DEFLATE with a 2-byte header and an Adler-32 trailer.
    Zlib,
    /// Raw DEFLATE (RFC 1951), no header or checksum.
    Deflate,
    /// The LZ4 frame format (magic `04 22 4D 18`).
    Lz4,
    /// The Snappy framing format (`sNaPpY` stream identifier, masked CRC-32C per chunk).
    Snappy,
    /// Zstandard frames (RFC 8878).
    Zstd,
}

impl Format {
    /// All formats.
    pub const ALL: [Format; 6] = [
        Format::Gzip,
        Format::Zlib,
        Format::Deflate,
        Format::Lz4,
        Format::Snappy,
        Format::Zstd,
    ];

    /// Lower-case name as the CLI takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Gzip => "gzip",
            Format::Zlib => "zlib",
            Format::Deflate => "deflate",
            Format::Lz4 => "lz4",
            Format::Snappy => "snappy",
            Format::Zstd => "zstd",
        }
    }

    /// Parses a name as [`Format::name`] writes it (also `gz`, `zst`, `sz`, `raw-deflate`).
    pub fn parse(name: &str) -> Result<Format> {
        match name.to_ascii_lowercase().as_str() {
            "gzip" | "gz" => Ok(Format::Gzip),
            "zlib" => Ok(Format::Zlib),
            "deflate" | "raw-deflate" | "raw" => Ok(Format::Deflate),
            "lz4" => Ok(Format::Lz4),
            "snappy" | "sz" => Ok(Format::Snappy),
            "zstd" | "zst" => Ok(Format::Zstd),
            other => Err(Error::parameter(
                "format",
                other,
                "gzip, zlib, deflate, lz4, snappy or zstd",
            )),
        }
    }

    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Gzip => "gz",
            Format::Zlib => "zz",
            Format::Deflate => "deflate",
            Format::Lz4 => "lz4",
            Format::Snappy => "sz",
            Format::Zstd => "zst",
        }
    }

    /// Guesses the format from the first bytes of a stream. Raw DEFLATE has no signature and is
    /// never guessed; zlib is guessed from a valid 2-byte header.
    pub fn detect(head: &[u8]) -> Option<Format> {
        if head.starts_with(&[0x1f, 0x8b]) {
            Some(Format::Gzip)
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) || is_skippable_magic(head) {
            Some(Format::Zstd)
        } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
            Some(Format::Lz4)
        } else if head.starts_with(b"\xff\x06\x00\x00sNaPpY") {
            Some(Format::Snappy)
        } else if head.len() >= 2
            && head[0] & 0x0f == 8
            && head[0] >> 4 <= 7
            && (u16::from(head[0]) << 8 | u16::from(head[1])) % 31 == 0
        {
            Some(Format::Zlib)
        } else {
            None
        }
    }

    /// The default compression level, and the valid range, or `None` where the format has no
    /// levels in this build (LZ4, Snappy).
    pub fn levels(self) -> Option<(i32, i32, i32)> {
        match self {
            Format::Gzip | Format::Zlib | Format::Deflate => Some((6, 0, 9)),
            Format::Zstd => Some((3, 1, 22)),
            Format::Lz4 | Format::Snappy => None,
        }
    }
}

/// Skippable frame magic shared by LZ4 and Zstd: `0x184D2A50..=0x184D2A5F` little-endian.
fn is_skippable_magic(head: &[u8]) -> bool {
    head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18]
}

/// A consumer of decompressed pieces.
type Sink<'a> = &'a mut dyn FnMut(&[u8]) -> Result<()>;

/// Where a decompressor puts its output: the caller's buffer, optionally spilled to a sink in
/// pieces so that memory stays bounded whatever the expansion ratio, and a cap on the total.
pub(crate) struct Output<'a> {
    buf: &'a mut Vec<u8>,
    spill: Option<Sink<'a>>,
    produced: &'a mut u64,
    limit: u64,
}

/// Output size at which a decompressor hands its buffer to the sink.
const SPILL_AT: usize = 1 << 20;

impl Output<'_> {
    /// Counts the bytes appended since the last call, enforces the limit and spills.
    fn check(&mut self, appended: usize) -> Result<()> {
        *self.produced += appended as u64;
        if *self.produced > self.limit {
            return Err(Error::TooLarge {
                what: "decompressed output",
                claimed: *self.produced,
                limit: self.limit,
            });
        }
        if self.buf.len() >= SPILL_AT {
            if let Some(spill) = self.spill.as_mut() {
                spill(self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// Spare capacity to offer a decoder: at least `want` bytes.
    fn reserve(&mut self, want: usize) {
        if self.buf.capacity() - self.buf.len() < want {
            self.buf.reserve(want);
        }
    }

    fn extend(&mut self, data: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(data);
        self.check(data.len())
    }
}

/// The inside of a compressor.
trait Encode: Send {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()>;
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()>;
}

/// The inside of a decompressor.
trait Decode: Send {
    fn push(&mut self, input: &[u8], out: &mut Output<'_>) -> Result<()>;
    /// Checks that the stream ended at a boundary the format allows; then resets.
    fn finish(&mut self, out: &mut Output<'_>) -> Result<()>;
}

/// A streaming compressor for one [`Format`].
pub struct Compressor {
    format: Format,
    inner: Box<dyn Encode>,
}

impl Compressor {
    /// A compressor at `level` (`None`: the format's default, see [`Format::levels`]).
    pub fn new(format: Format, level: Option<i32>) -> Result<Compressor> {
        let level = match (format.levels(), level) {
            (Some((default, _, _)), None) => default,
            (Some((_, lo, hi)), Some(l)) if (lo..=hi).contains(&l) => l,
            (Some((_, lo, hi)), Some(l)) => {
                return Err(Error::parameter(
                    "level",
                    l,
                    format!("{lo} to {hi} for {}", format.name()),
                ))
            }
            (None, None) => 0,
            (None, Some(l)) => {
                return Err(Error::parameter(
                    "level",
                    l,
                    format!("none: {} has no levels", format.name()),
                ))
            }
        };
        let inner: Box<dyn Encode> = match format {
            Format::Gzip => Box::new(deflate::Encoder::new(deflate::Wrap::Gzip, level as u32)),
            Format::Zlib => Box::new(deflate::Encoder::new(deflate::Wrap::Zlib, level as u32)),
            Format::Deflate => Box::new(deflate::Encoder::new(deflate::Wrap::Raw, level as u32)),
            Format::Lz4 => Box::new(lz4::Encoder::new()),
            Format::Snappy => Box::new(snappy::Encoder::new()),
            Format::Zstd => Box::new(zstd::Encoder::new(level)?),
        };
        Ok(Compressor { format, inner })
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Compresses the next chunk; appends whatever compressed output is ready to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.inner.push(input, out)
    }

    /// Ends the stream (flushes the last block, writes trailers) and resets for the next one.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        self.inner.finish(out)
    }
}

impl inpath_core::Transform for Compressor {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> inpath_core::Result<()> {
        Compressor::push(self, input, out).map_err(Into::into)
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> inpath_core::Result<()> {
        Compressor::finish(self, out).map_err(Into::into)
    }
}

/// A streaming decompressor for one [`Format`].
pub struct Decompressor {
    format: Format,
    inner: Box<dyn Decode>,
    produced: u64,
    limit: u64,
}

impl Decompressor {
    /// A decompressor with no limit on the output size.
    pub fn new(format: Format) -> Decompressor {
        let inner: Box<dyn Decode> = match format {
            Format::Gzip => Box::new(deflate::Decoder::new(deflate::Wrap::Gzip)),
            Format::Zlib => Box::new(deflate::Decoder::new(deflate::Wrap::Zlib)),
            Format::Deflate => Box::new(deflate::Decoder::new(deflate::Wrap::Raw)),
            Format::Lz4 => Box::new(lz4::Decoder::new()),
            Format::Snappy => Box::new(snappy::Decoder::new()),
            Format::Zstd => Box::new(zstd::Decoder::new()),
        };
        Decompressor {
            format,
            inner,
            produced: 0,
            limit: u64::MAX,
        }
    }

    /// Caps the decompressed size of one stream: past it, [`Error::TooLarge`].
    pub fn with_limit(mut self, limit: u64) -> Decompressor {
        self.limit = limit;
        self
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Decompresses the next chunk; appends the output that is ready to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let mut output = Output {
            buf: out,
            spill: None,
            produced: &mut self.produced,
            limit: self.limit,
        };
        self.inner.push(input, &mut output)
    }

    /// As [`Self::push`], but hands the output to `sink` in pieces of about 1 MiB so memory
    /// stays bounded whatever the expansion ratio; `scratch` is the buffer it reuses.
    pub fn push_to(
        &mut self,
        input: &[u8],
        scratch: &mut Vec<u8>,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut output = Output {
            buf: scratch,
            spill: Some(sink),
            produced: &mut self.produced,
            limit: self.limit,
        };
        self.inner.push(input, &mut output)?;
        if !output.buf.is_empty() {
            if let Some(spill) = output.spill.as_mut() {
                spill(output.buf)?;
            }
            output.buf.clear();
        }
        Ok(())
    }

    /// Ends the stream: reports a truncated stream, appends any last output, resets.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let mut output = Output {
            buf: out,
            spill: None,
            produced: &mut self.produced,
            limit: self.limit,
        };
        let result = self.inner.finish(&mut output);
        self.produced = 0;
        result
    }
}

impl inpath_core::Transform for Decompressor {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> inpath_core::Result<()> {
        Decompressor::push(self, input, out).map_err(Into::into)
    }
    fn finish(&mut self, out: &mut Vec<u8>) -> inpath_core::Result<()> {
        Decompressor::finish(self, out).map_err(Into::into)
    }
}

/// One-shot compression.
pub fn compress(format: Format, level: Option<i32>, data: &[u8]) -> Result<Vec<u8>> {
    let mut c = Compressor::new(format, level)?;
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    c.push(data, &mut out)?;
    c.finish(&mut out)?;
    Ok(out)
}

/// One-shot decompression, at most `limit` bytes of output.
pub fn decompress(format: Format, data: &[u8], limit: u64) -> Result<Vec<u8>> {
    let mut d = Decompressor::new(format).with_limit(limit);
    let mut out = Vec::new();
    d.push(data, &mut out)?;
    d.finish(&mut out)?;
    Ok(out)
}

/// Reads a little-endian u32 at `at` (the caller checked the length).
fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Runs a frame parser over the bytes held from earlier calls followed by `input`. `run`
/// consumes what it can and returns the length of the unconsumed tail (a partial header or
/// block), which `pending` keeps for the next call. Shared by the decoders whose formats are
/// parsed frame by frame (raw/zlib/gzip DEFLATE, LZ4 frames, Snappy framing).
pub(crate) fn resume(
    pending: &mut Vec<u8>,
    input: &[u8],
    run: impl FnOnce(&[u8]) -> Result<usize>,
) -> Result<()> {
    if pending.is_empty() {
        let rest = run(input)?;
        pending.extend_from_slice(&input[input.len() - rest..]);
    } else {
        pending.extend_from_slice(input);
        let rest = run(pending)?;
        let consumed = pending.len() - rest;
        pending.drain(..consumed);
    }
    Ok(())
}
