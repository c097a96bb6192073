//! The Snappy framing format (google/snappy `framing_format.txt`): a stream identifier chunk,
//! then compressed (`0x00`) or uncompressed (`0x01`) chunks of at most 65 536 bytes of data,
//! each with the masked CRC-32C of its uncompressed data. The block codec is `snap::raw`; the
//! chunks are written and parsed here.

use super::{le32, Decode, Encode, Output};
use crate::error::{Error, Result};

const FORMAT: &str = "snappy frame";
const STREAM_ID: [u8; 10] = *b"\xff\x06\x00\x00sNaPpY";
const MAX_CHUNK_DATA: usize = 65_536;

/// The CRC mask of the framing format: rotate right by 15, add a constant.
pub(crate) fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

pub(crate) struct Encoder {
    raw: snap::raw::Encoder,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    started: bool,
}

impl Encoder {
    pub(crate) fn new() -> Encoder {
        Encoder {
            raw: snap::raw::Encoder::new(),
            buf: Vec::with_capacity(MAX_CHUNK_DATA),
            scratch: vec![0; snap::raw::max_compress_len(MAX_CHUNK_DATA)],
            started: false,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            out.extend_from_slice(&STREAM_ID);
        }
    }

    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let crc = masked_crc(data);
        let n = self
            .raw
            .compress(data, &mut self.scratch)
            .map_err(|e| Error::Internal {
                what: "snappy encoder",
                detail: e.to_string(),
            })?;
        // Like the reference encoder: keep the compressed form only if it saves 1/8.
        let (kind, body) = if n < data.len() - data.len() / 8 {
            (0u8, &self.scratch[..n])
        } else {
            (1u8, data)
        };
        let len = body.len() + 4;
        out.extend_from_slice(&[kind, len as u8, (len >> 8) as u8, (len >> 16) as u8]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(body);
        Ok(())
    }
}

impl Encode for Encoder {
    fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.start(out);
        if !self.buf.is_empty() {
            let take = (MAX_CHUNK_DATA - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.buf.len() < MAX_CHUNK_DATA {
                return Ok(());
            }
            let buf = std::mem::take(&mut self.buf);
            self.chunk(&buf, out)?;
            self.buf = buf;
            self.buf.clear();
        }
        while input.len() >= MAX_CHUNK_DATA {
            self.chunk(&input[..MAX_CHUNK_DATA], out)?;
            input = &input[MAX_CHUNK_DATA..];
        }
        self.buf.extend_from_slice(input);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        self.start(out);
        let buf = std::mem::take(&mut self.buf);
        let result = if buf.is_empty() {
            Ok(())
        } else {
            self.chunk(&buf, out)
        };
        self.buf = buf;
        self.buf.clear();
        self.started = false;
        result
    }
}

pub(crate) struct Decoder {
    raw: snap::raw::Decoder,
    pending: Vec<u8>,
    block: Vec<u8>,
    seen_id: bool,
    seen_input: bool,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder {
            raw: snap::raw::Decoder::new(),
            pending: Vec::new(),
            block: vec![0; MAX_CHUNK_DATA],
            seen_id: false,
            seen_input: false,
        }
    }

    fn run<'d>(&mut self, mut data: &'d [u8], out: &mut Output<'_>) -> Result<&'d [u8]> {
        while data.len() >= 4 {
            let kind = data[0];
            let len = (le32(data, 0) >> 8) as usize;
            if !self.seen_id && kind != 0xff {
                return Err(Error::BadMagic {
                    what: "snappy framed stream",
                    found: format!("chunk type {kind:#04x}"),
                    expected: "stream identifier ff 06 00 00 sNaPpY".into(),
                });
            }
            if (0x02..=0x7f).contains(&kind) {
                return Err(Error::corrupt(
                    FORMAT,
                    format!("reserved unskippable chunk type {kind:#04x}"),
                ));
            }
            if data.len() < 4 + len {
                return Ok(data);
            }
            let body = &data[4..4 + len];
            match kind {
                0xff => {
                    if body != b"sNaPpY" {
                        return Err(Error::BadMagic {
                            what: "snappy framed stream",
                            found: hex(body),
                            expected: "734e61507059 (sNaPpY)".into(),
                        });
                    }
                    self.seen_id = true;
                }
                0x00 | 0x01 => {
                    if len < 4 {
                        return Err(Error::corrupt(
                            FORMAT,
                            format!("chunk of {len} bytes is too short for its CRC"),
                        ));
                    }
                    let stored = le32(body, 0);
                    let payload = &body[4..];
                    let decoded: &[u8] =
                        if kind == 0x00 {
                            let n = snap::raw::decompress_len(payload).map_err(|e| {
                                Error::corrupt(FORMAT, format!("compressed chunk: {e}"))
                            })?;
                            if n > MAX_CHUNK_DATA {
                                return Err(Error::corrupt(
                                    FORMAT,
                                    format!("chunk decodes to {n} bytes, more than 65536"),
                                ));
                            }
                            let n = self.raw.decompress(payload, &mut self.block[..n]).map_err(
                                |e| Error::corrupt(FORMAT, format!("compressed chunk: {e}")),
                            )?;
                            &self.block[..n]
                        } else {
                            if payload.len() > MAX_CHUNK_DATA {
                                return Err(Error::corrupt(
                                    FORMAT,
                                    "uncompressed chunk holds more than 65536 bytes",
                                ));
                            }
                            payload
                        };
                    let computed = masked_crc(decoded);
                    if stored != computed {
                        return Err(Error::StreamChecksum {
                            format: FORMAT,
                            what: "chunk CRC-32C",
                            stored,
                            computed,
                        });
                    }
                    out.extend(decoded)?;
                }
                // 0x80..=0xfd reserved skippable, 0xfe padding (0x02..=0x7f refused above).
                _ => {}
            }
            data = &data[4 + len..];
        }
        Ok(data)
    }
}

impl Decode for Decoder {
    fn push(&mut self, input: &[u8], out: &mut Output<'_>) -> Result<()> {
        if !input.is_empty() {
            self.seen_input = true;
        }
        let mut pending = std::mem::take(&mut self.pending);
        let result = super::resume(&mut pending, input, |data| Ok(self.run(data, out)?.len()));
        self.pending = pending;
        result
    }

    fn finish(&mut self, _out: &mut Output<'_>) -> Result<()> {
        let pending = self.pending.len() as u64;
        let needed = if pending >= 4 {
            u64::from(le32(&self.pending, 0) >> 8) + 4
        } else {
            4
        };
        self.pending.clear();
        self.seen_id = false;
        self.seen_input = false;
        if pending > 0 {
            return Err(Error::Truncated {
                what: "snappy chunk",
                needed,
                available: pending,
            });
        }
        // An empty input is an empty stream: python-snappy writes nothing at all for empty
        // input, and reading it back must work. Input without an identifier is refused in run.
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().take(16).map(|b| format!("{b:02x}")).collect()
}
