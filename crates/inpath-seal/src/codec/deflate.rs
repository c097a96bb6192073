//! gzip, zlib and raw DEFLATE on `flate2` (`zlib-rs` backend). `flate2` does the DEFLATE
//! coding and, for zlib, the 2-byte header and Adler-32 trailer; the gzip header (every flag),
//! trailer and member concatenation are parsed here.

use super::{Decode, Encode, Output};
use crate::error::{Error, Result};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Which wrapper around the DEFLATE data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wrap {
    Raw,
    Zlib,
    Gzip,
}

impl Wrap {
    fn name(self) -> &'static str {
        match self {
            Wrap::Raw => "deflate",
            Wrap::Zlib => "zlib",
            Wrap::Gzip => "gzip",
        }
    }
}

/// The gzip header this encoder writes: no name, no time stamp, OS "unknown" (255).
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Input is handed to zlib in pieces of this size, so the compressed bytes never depend on how
/// the caller cut the input (zlib's output depends on the sizes of the pieces it is given).
const STAGE: usize = 64 * 1024;

pub(crate) struct Encoder {
    wrap: Wrap,
    comp: Compress,
    stage: Vec<u8>,
    crc: crc32fast::Hasher,
    size: u32,
    started: bool,
}

impl Encoder {
    pub(crate) fn new(wrap: Wrap, level: u32) -> Encoder {
        Encoder {
            wrap,
            comp: Compress::new(Compression::new(level), wrap == Wrap::Zlib),
            stage: Vec::new(),
            crc: crc32fast::Hasher::new(),
            size: 0,
            started: false,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            if self.wrap == Wrap::Gzip {
                out.extend_from_slice(&GZIP_HEADER);
            }
        }
    }

    fn run(&mut self, mut input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) -> Result<()> {
        loop {
            if out.capacity() - out.len() < 4096 {
                out.reserve(input.len() / 2 + 32 * 1024);
            }
            let before = self.comp.total_in();
            let status =
                self.comp
                    .compress_vec(input, out, flush)
                    .map_err(|e| Error::Internal {
                        what: "deflate",
                        detail: e.to_string(),
                    })?;
            let used = (self.comp.total_in() - before) as usize;
            input = &input[used..];
            let room_left = out.capacity() > out.len();
            match flush {
                FlushCompress::Finish if status == Status::StreamEnd => return Ok(()),
                FlushCompress::Finish => {}
                _ if input.is_empty() && room_left => return Ok(()),
                _ => {}
            }
        }
    }
}

impl Encode for Encoder {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.start(out);
        if self.wrap == Wrap::Gzip {
            self.crc.update(input);
            self.size = self.size.wrapping_add(input.len() as u32);
        }
        let mut input = input;
        if !self.stage.is_empty() {
            let take = (STAGE - self.stage.len()).min(input.len());
            self.stage.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.stage.len() < STAGE {
                return Ok(());
            }
            let stage = std::mem::take(&mut self.stage);
            self.run(&stage, out, FlushCompress::None)?;
            self.stage = stage;
            self.stage.clear();
        }
        let whole = input.len() / STAGE * STAGE;
        for piece in input[..whole].chunks(STAGE) {
            self.run(piece, out, FlushCompress::None)?;
        }
        self.stage.extend_from_slice(&input[whole..]);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        self.start(out);
        let stage = std::mem::take(&mut self.stage);
        let result = self.run(&stage, out, FlushCompress::Finish);
        self.stage = stage;
        self.stage.clear();
        if result.is_ok() && self.wrap == Wrap::Gzip {
            let crc = std::mem::take(&mut self.crc).finalize();
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&self.size.to_le_bytes());
        }
        self.comp.reset();
        self.crc = crc32fast::Hasher::new();
        self.size = 0;
        self.started = false;
        result
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for a gzip member header (`first`: nothing decoded yet).
    Header { first: bool },
    /// Inside the DEFLATE data.
    Body,
    /// Waiting for the 8-byte gzip trailer.
    Trailer,
    /// A gzip member ended; another may follow.
    MemberEnd,
    /// A zlib or raw stream ended; nothing may follow.
    Done,
}

pub(crate) struct Decoder {
    wrap: Wrap,
    state: State,
    inflate: Decompress,
    pending: Vec<u8>,
    crc: crc32fast::Hasher,
    size: u32,
    seen_input: bool,
}

impl Decoder {
    pub(crate) fn new(wrap: Wrap) -> Decoder {
        Decoder {
            wrap,
            state: Self::initial(wrap),
            inflate: Decompress::new(wrap == Wrap::Zlib),
            pending: Vec::new(),
            crc: crc32fast::Hasher::new(),
            size: 0,
            seen_input: false,
        }
    }

    fn initial(wrap: Wrap) -> State {
        if wrap == Wrap::Gzip {
            State::Header { first: true }
        } else {
            State::Body
        }
    }

    fn reset(&mut self) {
        self.state = Self::initial(self.wrap);
        self.inflate.reset(self.wrap == Wrap::Zlib);
        self.pending.clear();
        self.crc = crc32fast::Hasher::new();
        self.size = 0;
        self.seen_input = false;
    }

    /// Runs the state machine over `data`; returns the bytes it could not use yet (a partial
    /// header or trailer), which the caller keeps for the next push.
    fn run<'d>(&mut self, mut data: &'d [u8], out: &mut Output<'_>) -> Result<&'d [u8]> {
        let format = self.wrap.name();
        loop {
            match self.state {
                State::Header { .. } => match parse_gzip_header(data)? {
                    None => return Ok(data),
                    Some(len) => {
                        data = &data[len..];
                        self.inflate.reset(false);
                        self.state = State::Body;
                    }
                },
                State::Body => {
                    let hash = if self.wrap == Wrap::Gzip {
                        Some((&mut self.crc, &mut self.size))
                    } else {
                        None
                    };
                    let (used, ended) = inflate(&mut self.inflate, data, out, format, hash)?;
                    data = &data[used..];
                    if !ended {
                        debug_assert!(data.is_empty());
                        return Ok(data);
                    }
                    self.state = match self.wrap {
                        Wrap::Gzip => State::Trailer,
                        _ => State::Done,
                    };
                }
                State::Trailer => {
                    if data.len() < 8 {
                        return Ok(data);
                    }
                    let stored_crc = super::le32(data, 0);
                    let stored_size = super::le32(data, 4);
                    let crc = std::mem::take(&mut self.crc).finalize();
                    if stored_crc != crc {
                        return Err(Error::StreamChecksum {
                            format,
                            what: "member trailer CRC-32",
                            stored: stored_crc,
                            computed: crc,
                        });
                    }
                    if stored_size != self.size {
                        return Err(Error::corrupt(
                            format,
                            format!(
                                "member trailer says {stored_size} bytes (mod 2^32), decoded {}",
                                self.size
                            ),
                        ));
                    }
                    self.size = 0;
                    data = &data[8..];
                    self.state = State::MemberEnd;
                }
                State::MemberEnd => {
                    if data.is_empty() {
                        return Ok(data);
                    }
                    self.state = State::Header { first: false };
                }
                State::Done => {
                    if !data.is_empty() {
                        return Err(Error::TrailingData {
                            format,
                            bytes: data.len() as u64,
                        });
                    }
                    return Ok(data);
                }
            }
        }
    }
}

/// Inflates from `input` into `out` until the input is used up or the DEFLATE stream ends.
/// Returns (bytes of input used, whether the stream ended). For gzip, `hash` receives the
/// output (CRC-32 and size) before it can be spilled to a sink.
fn inflate(
    d: &mut Decompress,
    mut input: &[u8],
    out: &mut Output<'_>,
    format: &'static str,
    mut hash: Option<(&mut crc32fast::Hasher, &mut u32)>,
) -> Result<(usize, bool)> {
    let mut used_total = 0usize;
    loop {
        out.reserve(64 * 1024);
        let (before_in, before_out) = (d.total_in(), d.total_out());
        let len_before = out.buf.len();
        let status = d
            .decompress_vec(input, out.buf, FlushDecompress::None)
            .map_err(|e| {
                Error::corrupt(format, describe_inflate_error(&e.to_string(), d.total_in()))
            })?;
        let used = (d.total_in() - before_in) as usize;
        let produced = (d.total_out() - before_out) as usize;
        debug_assert_eq!(out.buf.len() - len_before, produced);
        if let Some((crc, size)) = hash.as_mut() {
            crc.update(&out.buf[len_before..]);
            **size = size.wrapping_add(produced as u32);
        }
        used_total += used;
        input = &input[used..];
        out.check(produced)?;
        if status == Status::StreamEnd {
            return Ok((used_total, true));
        }
        let room_left = out.buf.capacity() > out.buf.len();
        if input.is_empty() && room_left {
            return Ok((used_total, false));
        }
        if used == 0 && produced == 0 && room_left {
            return Err(Error::corrupt(
                format,
                "the DEFLATE decoder made no progress",
            ));
        }
    }
}

fn describe_inflate_error(message: &str, offset: u64) -> String {
    let message = if message.is_empty() {
        "invalid DEFLATE data"
    } else {
        message
    };
    format!("{message} (near compressed byte {offset})")
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

    fn finish(&mut self, out: &mut Output<'_>) -> Result<()> {
        let _ = out;
        let format = self.wrap.name();
        let state = self.state;
        let pending = self.pending.len() as u64;
        let seen = self.seen_input;
        self.reset();
        match state {
            State::MemberEnd | State::Done => Ok(()),
            State::Header { first: false } if pending == 0 => Ok(()),
            State::Header { .. } if !seen => Err(Error::Truncated {
                what: stream_name(format),
                needed: 1,
                available: 0,
            }),
            State::Header { .. } => Err(Error::Truncated {
                what: "gzip member header",
                needed: pending + 1,
                available: pending,
            }),
            State::Body => Err(Error::Truncated {
                what: stream_name(format),
                needed: pending + 1,
                available: pending,
            }),
            State::Trailer => Err(Error::Truncated {
                what: "gzip member trailer",
                needed: 8,
                available: pending,
            }),
        }
    }
}

fn stream_name(format: &str) -> &'static str {
    match format {
        "gzip" => "gzip stream",
        "zlib" => "zlib stream",
        _ => "deflate stream",
    }
}

/// Parses a gzip member header (RFC 1952 §2.3). `Ok(None)`: more bytes needed; `Ok(Some(n))`:
/// the header is `n` bytes long.
fn parse_gzip_header(data: &[u8]) -> Result<Option<usize>> {
    const FHCRC: u8 = 2;
    const FEXTRA: u8 = 4;
    const FNAME: u8 = 8;
    const FCOMMENT: u8 = 16;
    if data.len() >= 2 && data[..2] != [0x1f, 0x8b] {
        return Err(Error::BadMagic {
            what: "gzip member",
            found: hex2(&data[..2]),
            expected: "1f8b".into(),
        });
    }
    if data.len() < 10 {
        return Ok(None);
    }
    if data[2] != 8 {
        return Err(Error::corrupt(
            "gzip",
            format!("compression method {} is not DEFLATE (8)", data[2]),
        ));
    }
    let flags = data[3];
    if flags & 0xe0 != 0 {
        return Err(Error::corrupt(
            "gzip",
            format!("reserved header flag bits set ({flags:#04x})"),
        ));
    }
    let mut at = 10;
    if flags & FEXTRA != 0 {
        if data.len() < at + 2 {
            return Ok(None);
        }
        let xlen = u16::from_le_bytes([data[at], data[at + 1]]) as usize;
        at += 2 + xlen;
        if data.len() < at {
            return Ok(None);
        }
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            match memchr_zero(&data[at..]) {
                Some(end) => at += end + 1,
                None => return Ok(None),
            }
        }
    }
    if flags & FHCRC != 0 {
        if data.len() < at + 2 {
            return Ok(None);
        }
        let stored = u16::from_le_bytes([data[at], data[at + 1]]);
        let computed = (crc32fast::hash(&data[..at]) & 0xffff) as u16;
        if stored != computed {
            return Err(Error::StreamChecksum {
                format: "gzip",
                what: "header CRC-16",
                stored: stored.into(),
                computed: computed.into(),
            });
        }
        at += 2;
    }
    Ok(Some(at))
}

fn memchr_zero(data: &[u8]) -> Option<usize> {
    data.iter().position(|&b| b == 0)
}

fn hex2(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
