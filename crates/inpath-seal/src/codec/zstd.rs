//! Zstandard (RFC 8878) on the reference library (`zstd` crate over libzstd). Encoding writes one
//! frame per stream with a content checksum; decoding takes concatenated frames and skippable
//! frames, and reports a stream that stops inside a frame.

use super::{Decode, Encode, Output};
use crate::error::{Error, Result};
use zstd::stream::raw::{CParameter, InBuffer, Operation, OutBuffer};

const FORMAT: &str = "zstd";

fn internal(e: std::io::Error) -> Error {
    Error::Internal {
        what: "zstd encoder",
        detail: e.to_string(),
    }
}

pub(crate) struct Encoder {
    raw: zstd::stream::raw::Encoder<'static>,
}

impl Encoder {
    pub(crate) fn new(level: i32) -> Result<Encoder> {
        let mut raw = zstd::stream::raw::Encoder::new(level).map_err(internal)?;
        raw.set_parameter(CParameter::ChecksumFlag(true))
            .map_err(internal)?;
        Ok(Encoder { raw })
    }
}

impl Encode for Encoder {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let mut inbuf = InBuffer::around(input);
        while inbuf.pos() < input.len() {
            out.reserve((input.len() - inbuf.pos()) / 2 + 4096);
            let pos = out.len();
            let mut outbuf = OutBuffer::around_pos(out, pos);
            self.raw.run(&mut inbuf, &mut outbuf).map_err(internal)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        loop {
            out.reserve(16 * 1024);
            let pos = out.len();
            let mut outbuf = OutBuffer::around_pos(out, pos);
            let left = self.raw.finish(&mut outbuf, true).map_err(internal)?;
            if left == 0 {
                break;
            }
        }
        self.raw.reinit().map_err(internal)
    }
}

pub(crate) struct Decoder {
    raw: zstd::stream::raw::Decoder<'static>,
    /// Inside a frame (the last call did not end on a frame boundary).
    in_frame: bool,
    seen_input: bool,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        // Creating a decompression context fails only when memory is exhausted.
        let raw = zstd::stream::raw::Decoder::new().expect("zstd decompression context");
        Decoder {
            raw,
            in_frame: false,
            seen_input: false,
        }
    }
}

impl Decode for Decoder {
    fn push(&mut self, input: &[u8], out: &mut Output<'_>) -> Result<()> {
        if input.is_empty() {
            return Ok(());
        }
        self.seen_input = true;
        let mut inbuf = InBuffer::around(input);
        loop {
            out.reserve(128 * 1024);
            let before = out.buf.len();
            let read_before = inbuf.pos();
            let mut outbuf = OutBuffer::around_pos(&mut *out.buf, before);
            let hint = self
                .raw
                .run(&mut inbuf, &mut outbuf)
                .map_err(|e| Error::corrupt(FORMAT, e.to_string()))?;
            let full = outbuf.pos() == outbuf.capacity();
            let produced = out.buf.len() - before;
            // A call that neither read nor wrote (after a frame ended exactly at a full output
            // buffer) says nothing about where the stream stands.
            if produced > 0 || inbuf.pos() != read_before {
                self.in_frame = hint != 0;
            }
            out.check(produced)?;
            if inbuf.pos() == input.len() && !full {
                return Ok(());
            }
        }
    }

    fn finish(&mut self, _out: &mut Output<'_>) -> Result<()> {
        let (in_frame, seen) = (self.in_frame, self.seen_input);
        self.in_frame = false;
        self.seen_input = false;
        // Reset the context so a truncated frame does not leak into the next stream.
        self.raw.reinit().map_err(|e| Error::Internal {
            what: "zstd decoder",
            detail: e.to_string(),
        })?;
        if !seen {
            return Err(Error::Truncated {
                what: "zstd stream",
                needed: 4,
                available: 0,
            });
        }
        if in_frame {
            return Err(Error::Truncated {
                what: "zstd frame (the stream stops inside it)",
                needed: 1,
                available: 0,
            });
        }
        Ok(())
    }
}
