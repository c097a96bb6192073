//! The LZ4 frame format (lz4 Frame Format Description v1.6.x). Encoding is `lz4_flex`'s frame
//! encoder (64 KiB independent blocks, content checksum). Decoding parses frames here and
//! decodes blocks with `lz4_flex`'s checked block decoder, so it takes every frame the `lz4`
//! tool writes: linked blocks, block and content checksums, content size, stored blocks,
//! skippable frames and concatenated frames.

use super::{le32, Decode, Encode, Output};
use crate::error::{Error, Result};
use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
use std::io::Write;
use xxhash_rust::xxh32::{xxh32, Xxh32};

const MAGIC: u32 = 0x184D_2204;
const LEGACY_MAGIC: u32 = 0x184C_2102;
const FORMAT: &str = "lz4 frame";
/// Linked blocks may refer back this far into earlier blocks.
const WINDOW: usize = 64 * 1024;

pub(crate) struct Encoder {
    inner: Option<FrameEncoder<Vec<u8>>>,
}

impl Encoder {
    pub(crate) fn new() -> Encoder {
        Encoder { inner: None }
    }

    fn frame_info() -> FrameInfo {
        FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(BlockMode::Independent)
            .content_checksum(true)
    }

    fn encoder(&mut self) -> &mut FrameEncoder<Vec<u8>> {
        self.inner
            .get_or_insert_with(|| FrameEncoder::with_frame_info(Self::frame_info(), Vec::new()))
    }
}

impl Encode for Encoder {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let enc = self.encoder();
        enc.write_all(input).map_err(|e| Error::Internal {
            what: "lz4 frame encoder",
            detail: e.to_string(),
        })?;
        let buf = enc.get_mut();
        out.extend_from_slice(buf);
        buf.clear();
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        self.encoder();
        let enc = self.inner.take().expect("encoder just made");
        let buf = enc.finish().map_err(|e| Error::Internal {
            what: "lz4 frame encoder",
            detail: e.to_string(),
        })?;
        out.extend_from_slice(&buf);
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before a frame's magic number (`frames`: complete frames so far, skippable included).
    Magic,
    /// After the magic, before the frame descriptor.
    Descriptor,
    /// Before a block header or the end mark.
    BlockHeader,
    /// Before a block's data (`len` bytes, `stored`: not compressed).
    BlockData { len: usize, stored: bool },
    /// Before the content checksum.
    ContentChecksum,
    /// Inside a skippable frame, `left` bytes to skip.
    Skip { left: u64 },
}

#[derive(Clone, Copy, Default)]
struct Frame {
    independent: bool,
    block_checksum: bool,
    content_checksum: bool,
    content_size: Option<u64>,
    block_max: usize,
}

pub(crate) struct Decoder {
    state: State,
    frame: Frame,
    pending: Vec<u8>,
    block: Vec<u8>,
    history: Vec<u8>,
    content_hash: Xxh32,
    content_len: u64,
    frames: u64,
    seen_input: bool,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder {
            state: State::Magic,
            frame: Frame::default(),
            pending: Vec::new(),
            block: Vec::new(),
            history: Vec::new(),
            content_hash: Xxh32::new(0),
            content_len: 0,
            frames: 0,
            seen_input: false,
        }
    }

    fn run<'d>(&mut self, mut data: &'d [u8], out: &mut Output<'_>) -> Result<&'d [u8]> {
        loop {
            match self.state {
                State::Magic => {
                    if data.is_empty() {
                        return Ok(data);
                    }
                    if data.len() < 4 {
                        return Ok(data);
                    }
                    let magic = le32(data, 0);
                    if magic == MAGIC {
                        self.state = State::Descriptor;
                        data = &data[4..];
                    } else if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
                        if data.len() < 8 {
                            return Ok(data);
                        }
                        self.state = State::Skip {
                            left: u64::from(le32(data, 4)),
                        };
                        data = &data[8..];
                    } else if magic == LEGACY_MAGIC {
                        return Err(Error::corrupt(
                            FORMAT,
                            "legacy LZ4 frames (lz4 -l) are not supported",
                        ));
                    } else {
                        return Err(Error::BadMagic {
                            what: "lz4 frame",
                            found: format!("{magic:08x}"),
                            expected: format!("{MAGIC:08x}"),
                        });
                    }
                }
                State::Descriptor => {
                    if data.len() < 2 {
                        return Ok(data);
                    }
                    let (flg, bd) = (data[0], data[1]);
                    if flg >> 6 != 1 {
                        return Err(Error::corrupt(
                            FORMAT,
                            format!("frame version {} is not 1", flg >> 6),
                        ));
                    }
                    if flg & 0x02 != 0 || bd & 0x8f != 0 {
                        return Err(Error::corrupt(FORMAT, "reserved descriptor bits are set"));
                    }
                    let has_size = flg & 0x08 != 0;
                    let has_dict = flg & 0x01 != 0;
                    let len = 2 + if has_size { 8 } else { 0 } + if has_dict { 4 } else { 0 } + 1;
                    if data.len() < len {
                        return Ok(data);
                    }
                    let hc = ((xxh32(&data[..len - 1], 0) >> 8) & 0xff) as u8;
                    if hc != data[len - 1] {
                        return Err(Error::StreamChecksum {
                            format: FORMAT,
                            what: "frame descriptor",
                            stored: data[len - 1].into(),
                            computed: hc.into(),
                        });
                    }
                    if has_dict {
                        return Err(Error::corrupt(
                            FORMAT,
                            "the frame needs a dictionary (dictionary id set)",
                        ));
                    }
                    let block_max = match (bd >> 4) & 7 {
                        4 => 64 << 10,
                        5 => 256 << 10,
                        6 => 1 << 20,
                        7 => 4 << 20,
                        other => {
                            return Err(Error::corrupt(
                                FORMAT,
                                format!("block maximum size code {other} is not 4..7"),
                            ))
                        }
                    };
                    let content_size = has_size
                        .then(|| u64::from_le_bytes(data[2..10].try_into().expect("8 bytes")));
                    self.frame = Frame {
                        independent: flg & 0x20 != 0,
                        block_checksum: flg & 0x10 != 0,
                        content_checksum: flg & 0x04 != 0,
                        content_size,
                        block_max,
                    };
                    self.content_hash = Xxh32::new(0);
                    self.content_len = 0;
                    self.history.clear();
                    data = &data[len..];
                    self.state = State::BlockHeader;
                }
                State::BlockHeader => {
                    if data.len() < 4 {
                        return Ok(data);
                    }
                    let word = le32(data, 0);
                    data = &data[4..];
                    if word == 0 {
                        self.state = State::ContentChecksum;
                        continue;
                    }
                    let len = (word & 0x7fff_ffff) as usize;
                    if len > self.frame.block_max {
                        return Err(Error::corrupt(
                            FORMAT,
                            format!(
                                "block of {len} bytes exceeds the frame's maximum of {}",
                                self.frame.block_max
                            ),
                        ));
                    }
                    self.state = State::BlockData {
                        len,
                        stored: word & 0x8000_0000 != 0,
                    };
                }
                State::BlockData { len, stored } => {
                    let need = len + if self.frame.block_checksum { 4 } else { 0 };
                    if data.len() < need {
                        return Ok(data);
                    }
                    let block = &data[..len];
                    if self.frame.block_checksum {
                        let stored_sum = le32(data, len);
                        let computed = xxh32(block, 0);
                        if stored_sum != computed {
                            return Err(Error::StreamChecksum {
                                format: FORMAT,
                                what: "block",
                                stored: stored_sum,
                                computed,
                            });
                        }
                    }
                    self.decode_block(block, stored, out)?;
                    data = &data[need..];
                    self.state = State::BlockHeader;
                }
                State::ContentChecksum => {
                    if self.frame.content_checksum {
                        if data.len() < 4 {
                            return Ok(data);
                        }
                        let stored = le32(data, 0);
                        let computed = self.content_hash.digest();
                        if stored != computed {
                            return Err(Error::StreamChecksum {
                                format: FORMAT,
                                what: "content",
                                stored,
                                computed,
                            });
                        }
                        data = &data[4..];
                    }
                    if let Some(size) = self.frame.content_size {
                        if size != self.content_len {
                            return Err(Error::corrupt(
                                FORMAT,
                                format!(
                                    "frame declares {size} bytes of content, decoded {}",
                                    self.content_len
                                ),
                            ));
                        }
                    }
                    self.frames += 1;
                    self.state = State::Magic;
                }
                State::Skip { left } => {
                    let take = (data.len() as u64).min(left) as usize;
                    data = &data[take..];
                    let left = left - take as u64;
                    if left > 0 {
                        self.state = State::Skip { left };
                        return Ok(data);
                    }
                    self.frames += 1;
                    self.state = State::Magic;
                }
            }
        }
    }

    fn decode_block(&mut self, block: &[u8], stored: bool, out: &mut Output<'_>) -> Result<()> {
        let decoded: &[u8] = if stored {
            block
        } else {
            self.block.resize(self.frame.block_max, 0);
            let result = if self.frame.independent || self.history.is_empty() {
                lz4_flex::block::decompress_into(block, &mut self.block)
            } else {
                lz4_flex::block::decompress_into_with_dict(block, &mut self.block, &self.history)
            };
            let n = result.map_err(|e| Error::corrupt(FORMAT, format!("block: {e}")))?;
            &self.block[..n]
        };
        if self.frame.content_checksum {
            self.content_hash.update(decoded);
        }
        self.content_len += decoded.len() as u64;
        if !self.frame.independent {
            // Keep the last 64 KiB of output as the dictionary of the next block.
            if decoded.len() >= WINDOW {
                self.history.clear();
                self.history
                    .extend_from_slice(&decoded[decoded.len() - WINDOW..]);
            } else {
                let keep = (WINDOW - decoded.len()).min(self.history.len());
                self.history.drain(..self.history.len() - keep);
                self.history.extend_from_slice(decoded);
            }
        }
        out.extend(decoded)
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
        let state = self.state;
        let pending = self.pending.len() as u64;
        let frames = self.frames;
        *self = Decoder::new();
        match state {
            State::Magic if pending == 0 && frames > 0 => Ok(()),
            State::Magic if pending == 0 => Err(Error::Truncated {
                what: "lz4 frame stream",
                needed: 4,
                available: 0,
            }),
            State::Magic => Err(Error::Truncated {
                what: "lz4 frame magic",
                needed: 4,
                available: pending,
            }),
            State::Descriptor => Err(Error::Truncated {
                what: "lz4 frame descriptor",
                needed: 3,
                available: pending,
            }),
            State::BlockHeader => Err(Error::Truncated {
                what: "lz4 block header (end mark missing)",
                needed: 4,
                available: pending,
            }),
            State::BlockData { len, .. } => Err(Error::Truncated {
                what: "lz4 block",
                needed: len as u64,
                available: pending,
            }),
            State::ContentChecksum => Err(Error::Truncated {
                what: "lz4 content checksum",
                needed: 4,
                available: pending,
            }),
            State::Skip { left } => Err(Error::Truncated {
                what: "lz4 skippable frame",
                needed: left,
                available: 0,
            }),
        }
    }
}
