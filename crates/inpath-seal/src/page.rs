//! The page codec: `seal(page) -> record` compresses a page and then encrypts it, and
//! `unseal(record) -> page` decrypts and then decompresses, as the SAP HANA security engine does
//! on the storage I/O path. Every page is independent: no dictionary, counter or chain crosses
//! pages.
//!
//! # Record format (version 1)
//!
//! A record is a fixed 64-byte header followed by the payload. All integers little-endian.
//!
//! ```text
//!  offset size field
//!   0     4   magic "IPSL"
//!   4     1   format version (1)
//!   5     1   header length in bytes (64)
//!   6     1   compression: 0 none, 1 raw DEFLATE, 2 LZ4 block, 3 Zstd frame, 4 Snappy raw
//!   7     1   compression level used (signed; 0 where the codec has none)
//!   8     1   cipher: 0 none, 1 AES-ECB, 2 AES-CTR, 3 AES-CBC, 4 AES-GCM
//!   9     1   key length in bytes (0, 16, 24, 32)
//!  10     1   flags: bit 0 STORED (compression did not pay, the page is stored as is),
//!             bit 1 PADDED (PKCS#7 padding before encryption: ECB and CBC)
//!  11     1   reserved, 0
//!  12     4   key id
//!  16     8   page length (bytes before compression)
//!  24     8   payload length (bytes after the header)
//!  32    16   IV / nonce: CTR initial counter block; CBC IV; GCM 96-bit nonce then 4 zero
//!             bytes; zero for ECB and none
//!  48     4   page CRC-32C (Castagnoli) of the page; 0 in the GCM tier (the tag covers it)
//!  52     4   payload CRC-32C of the payload as stored
//!  56     4   reserved, 0
//!  60     4   header CRC-32C of bytes 0..60
//! ```
//!
//! The payload is the body (the compressed page, or the page itself when STORED or uncompressed)
//! encrypted by the tier: CTR and none leave its length; ECB and CBC add PKCS#7 padding (1 to 16
//! bytes); GCM appends the 16-byte tag and authenticates header bytes 0..48 as associated data.
//!
//! Reading checks, in order: length, magic, version, header CRC, field values and limits, key
//! id, payload CRC (a mismatch means the record was damaged), then decryption and decompression,
//! then the page CRC. With the payload intact, a failure after that point means the key is not
//! the one that sealed the record ([`Error::WrongKey`]); in the GCM tier a failed tag is
//! [`Error::AuthenticationFailed`].
//!
//! # Nonces
//!
//! A [`Sealer`] draws a random 64-bit prefix from the operating system when it is made and
//! counts records with a 32-bit counter; after 2^32 records it draws a new prefix. The record's
//! nonce block is `prefix (8) || counter (4, big-endian) || 0 (4)`:
//! - CTR uses it as the initial counter block; the low 32 bits count the page's blocks, so a
//!   page may be up to 64 GiB and no two records' counter ranges overlap;
//! - GCM uses its first 12 bytes as the nonce;
//! - CBC uses `AES_k(nonce block)` as the IV, which is unpredictable as CBC needs
//!   (NIST SP 800-38A, appendix C);
//! - ECB has no IV.
//!
//! A batch assigns nonces in page order before any thread starts, so its records are
//! byte-identical to sealing the pages one by one, whatever the number of threads.

use crate::aes::Gcm;
use crate::aes::{self, AnyAes, Key, KeyRing};
use crate::error::{Error, Result};
use crate::kernel;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Magic number at the start of every record.
pub const MAGIC: [u8; 4] = *b"IPSL";
/// Format version written by this build.
pub const VERSION: u8 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 64;
/// Default limit on the page length a reader accepts (1 GiB).
pub const DEFAULT_MAX_PAGE: u64 = 1 << 30;

const FLAG_STORED: u8 = 1;
const FLAG_PADDED: u8 = 2;
const GCM_TAG: usize = 16;

/// Page compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Store the page as is.
    None,
    /// Raw DEFLATE (RFC 1951) at a level 0-9 (the reference's choice: level 1).
    Deflate(u8),
    /// LZ4 block format.
    Lz4,
    /// One Zstd frame at a level 1-22.
    Zstd(i8),
    /// Snappy raw (block) format.
    Snappy,
}

impl Compression {
    /// The default: raw DEFLATE at level 1, as in the reference.
    pub const DEFAULT: Compression = Compression::Deflate(1);

    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Deflate(_) => 1,
            Compression::Lz4 => 2,
            Compression::Zstd(_) => 3,
            Compression::Snappy => 4,
        }
    }

    fn level(self) -> i8 {
        match self {
            Compression::Deflate(l) => l as i8,
            Compression::Zstd(l) => l,
            _ => 0,
        }
    }

    /// Name as the CLI takes it (`none`, `deflate`, `lz4`, `zstd`, `snappy`), with the level.
    pub fn describe(self) -> String {
        match self {
            Compression::None => "none".into(),
            Compression::Deflate(l) => format!("deflate-{l}"),
            Compression::Lz4 => "lz4".into(),
            Compression::Zstd(l) => format!("zstd-{l}"),
            Compression::Snappy => "snappy".into(),
        }
    }

    /// Parses `none`, `deflate`, `deflate-N` (or `deflate:N`), `lz4`, `zstd`, `zstd-N`, `snappy`.
    pub fn parse(text: &str) -> Result<Compression> {
        let lower = text.to_ascii_lowercase();
        let (name, level) = match lower.split_once(['-', ':']) {
            Some((name, level)) => (name, Some(level)),
            None => (lower.as_str(), None),
        };
        let bad = || {
            Error::parameter(
                "compression",
                text,
                "none, deflate[-0..9], lz4, zstd[-1..22] or snappy",
            )
        };
        let num = |lo: i32, hi: i32, default: i32| -> Result<i32> {
            match level {
                None => Ok(default),
                Some(l) => l
                    .parse::<i32>()
                    .ok()
                    .filter(|l| (lo..=hi).contains(l))
                    .ok_or_else(bad),
            }
        };
        match name {
            "none" if level.is_none() => Ok(Compression::None),
            "deflate" => Ok(Compression::Deflate(num(0, 9, 1)? as u8)),
            "lz4" if level.is_none() => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd(num(1, 22, 1)? as i8)),
            "snappy" if level.is_none() => Ok(Compression::Snappy),
            _ => Err(bad()),
        }
    }

    /// Largest expansion a valid body of this codec can have (output / input), used to refuse
    /// headers that claim impossible page lengths before allocating them.
    fn max_ratio(code: u8) -> u64 {
        match code {
            1 => 1032,    // DEFLATE: 258 bytes per 2-bit-ish match symbol, bounded at 1032:1
            2 => 256,     // LZ4: 255 extra length bytes per byte
            3 => 1 << 17, // Zstd: an RLE block of 128 KiB fits in 4 bytes
            4 => 64,      // Snappy: a 64-byte copy per 2-byte tag at best
            _ => 1,
        }
    }
}

/// The encryption tier of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    /// No encryption.
    None,
    /// AES-ECB with PKCS#7 padding. Leaks equal 16-byte blocks; no integrity.
    Ecb,
    /// AES-CTR. Confidential with a unique nonce; no integrity (bit flips go through).
    Ctr,
    /// AES-CBC with PKCS#7 padding and an unpredictable IV. No integrity.
    Cbc,
    /// AES-256-GCM. Confidential and authenticated (header and payload).
    Gcm,
}

impl Cipher {
    fn code(self) -> u8 {
        match self {
            Cipher::None => 0,
            Cipher::Ecb => 1,
            Cipher::Ctr => 2,
            Cipher::Cbc => 3,
            Cipher::Gcm => 4,
        }
    }

    fn from_code(code: u8) -> Option<Cipher> {
        Some(match code {
            0 => Cipher::None,
            1 => Cipher::Ecb,
            2 => Cipher::Ctr,
            3 => Cipher::Cbc,
            4 => Cipher::Gcm,
            _ => return None,
        })
    }

    /// Lower-case mode name (`none`, `ecb`, `ctr`, `cbc`, `gcm`).
    pub fn name(self) -> &'static str {
        match self {
            Cipher::None => "none",
            Cipher::Ecb => "ecb",
            Cipher::Ctr => "ctr",
            Cipher::Cbc => "cbc",
            Cipher::Gcm => "gcm",
        }
    }

    fn padded(self) -> bool {
        matches!(self, Cipher::Ecb | Cipher::Cbc)
    }

    /// Parses a CLI cipher name: `none`, `aes128-ecb` … `aes256-cbc`, `aes256-gcm`. Returns the
    /// tier and the key length in bits it needs (0 for none).
    pub fn parse(text: &str) -> Result<(Cipher, u32)> {
        let lower = text.to_ascii_lowercase();
        if lower == "none" {
            return Ok((Cipher::None, 0));
        }
        let bad = || {
            Error::parameter(
                "cipher",
                text,
                "none, aes{128,192,256}-{ecb,ctr,cbc} or aes256-gcm",
            )
        };
        let (bits, mode) = lower
            .strip_prefix("aes")
            .and_then(|rest| rest.split_once('-'))
            .ok_or_else(bad)?;
        let bits: u32 = match bits {
            "128" => 128,
            "192" => 192,
            "256" => 256,
            _ => return Err(bad()),
        };
        let cipher = match mode {
            "ecb" => Cipher::Ecb,
            "ctr" => Cipher::Ctr,
            "cbc" => Cipher::Cbc,
            "gcm" if bits == 256 => Cipher::Gcm,
            _ => return Err(bad()),
        };
        Ok((cipher, bits))
    }
}

/// What a [`Sealer`] does to each page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealConfig {
    /// Compression before encryption.
    pub compression: Compression,
    /// Encryption tier.
    pub cipher: Cipher,
}

impl Default for SealConfig {
    fn default() -> Self {
        SealConfig {
            compression: Compression::DEFAULT,
            // Authenticated by default: GCM detects any change to a record; ECB, CTR and CBC
            // detect accidental damage only (a CRC is not a MAC).
            cipher: Cipher::Gcm,
        }
    }
}

/// A record header, as read from or written to the first 64 bytes of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u8,
    /// Compression code (see the module docs).
    pub compression: u8,
    /// Compression level used.
    pub level: i8,
    /// Encryption tier.
    pub cipher: Cipher,
    /// Key length in bytes (0 without encryption).
    pub key_len: u8,
    /// Flag bits.
    pub flags: u8,
    /// Key id.
    pub key_id: u32,
    /// Page length.
    pub page_len: u64,
    /// Payload length.
    pub payload_len: u64,
    /// IV or nonce block.
    pub iv: [u8; 16],
    /// CRC-32C of the page (0 in the GCM tier).
    pub page_crc: u32,
    /// CRC-32C of the payload.
    pub payload_crc: u32,
}

impl Header {
    /// Whether the page was stored without compression (compression was off or did not pay).
    pub fn stored(&self) -> bool {
        self.flags & FLAG_STORED != 0 || self.compression == 0
    }

    /// Whole record length: header plus payload.
    pub fn record_len(&self) -> u64 {
        HEADER_LEN as u64 + self.payload_len
    }

    /// Compression as a name (`deflate-1`, `lz4`...; `stored` when it did not pay).
    pub fn compression_name(&self) -> String {
        let name = match self.compression {
            0 => "none".to_string(),
            1 => format!("deflate-{}", self.level),
            2 => "lz4".to_string(),
            3 => format!("zstd-{}", self.level),
            4 => "snappy".to_string(),
            other => format!("unknown({other})"),
        };
        if self.flags & FLAG_STORED != 0 {
            format!("{name} (stored)")
        } else {
            name
        }
    }

    /// Cipher as the CLI names it (`aes256-ctr`, `none`).
    pub fn cipher_name(&self) -> String {
        match self.cipher {
            Cipher::None => "none".into(),
            c => format!("aes{}-{}", u32::from(self.key_len) * 8, c.name()),
        }
    }

    /// The 64 header bytes, header CRC included.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC);
        h[4] = self.version;
        h[5] = HEADER_LEN as u8;
        h[6] = self.compression;
        h[7] = self.level as u8;
        h[8] = self.cipher.code();
        h[9] = self.key_len;
        h[10] = self.flags;
        h[12..16].copy_from_slice(&self.key_id.to_le_bytes());
        h[16..24].copy_from_slice(&self.page_len.to_le_bytes());
        h[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        h[32..48].copy_from_slice(&self.iv);
        h[48..52].copy_from_slice(&self.page_crc.to_le_bytes());
        h[52..56].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Parses and checks a header: length, magic, version, header CRC, field values, and the
    /// page length against `max_page`. Does not look at the payload.
    pub fn parse(bytes: &[u8], max_page: u64) -> Result<Header> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "seal record header",
                needed: HEADER_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let h = &bytes[..HEADER_LEN];
        if h[0..4] != MAGIC {
            return Err(Error::BadMagic {
                what: "seal record",
                found: h[0..4].iter().map(|b| format!("{b:02x}")).collect(),
                expected: "4950534c (IPSL)".into(),
            });
        }
        if h[4] != VERSION {
            return Err(Error::UnsupportedVersion {
                version: h[4],
                supported: "1",
            });
        }
        let stored_crc = u32::from_le_bytes(h[60..64].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&h[..60]);
        if stored_crc != computed {
            return Err(Error::HeaderChecksum {
                stored: stored_crc,
                computed,
            });
        }
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let bad = |field: &'static str, detail: String| Err(Error::BadHeader { field, detail });
        if usize::from(h[5]) != HEADER_LEN {
            return bad(
                "header length",
                format!("{} (version 1 headers are 64 bytes)", h[5]),
            );
        }
        if h[6] > 4 {
            return bad("compression", format!("unknown code {}", h[6]));
        }
        let Some(cipher) = Cipher::from_code(h[8]) else {
            return bad("cipher", format!("unknown code {}", h[8]));
        };
        let key_len = h[9];
        let key_ok = match cipher {
            Cipher::None => key_len == 0,
            Cipher::Gcm => key_len == 32,
            _ => matches!(key_len, 16 | 24 | 32),
        };
        if !key_ok {
            return bad(
                "key length",
                format!("{key_len} bytes for cipher {}", cipher.name()),
            );
        }
        let flags = h[10];
        if flags & !(FLAG_STORED | FLAG_PADDED) != 0 {
            return bad("flags", format!("unknown flag bits {flags:#04x}"));
        }
        if (flags & FLAG_PADDED != 0) != cipher.padded() {
            return bad(
                "flags",
                format!("PADDED flag does not match cipher {}", cipher.name()),
            );
        }
        if h[11] != 0 || h[56..60] != [0; 4] {
            return bad("reserved", "reserved bytes are not zero".into());
        }
        let header = Header {
            version: h[4],
            compression: h[6],
            level: h[7] as i8,
            cipher,
            key_len,
            flags,
            key_id: u32_at(12),
            page_len: u64_at(16),
            payload_len: u64_at(24),
            iv: h[32..48].try_into().expect("16 bytes"),
            page_crc: u32_at(48),
            payload_crc: u32_at(52),
        };
        header.check_sizes(max_page)?;
        Ok(header)
    }

    /// Checks that the page and payload lengths agree with each other and the limits.
    fn check_sizes(&self, max_page: u64) -> Result<()> {
        if self.page_len > max_page {
            return Err(Error::TooLarge {
                what: "seal record page length",
                claimed: self.page_len,
                limit: max_page,
            });
        }
        // The whole record's length (header + payload) must be a number: a payload length
        // near 2^64 would wrap `record_len` around to less than a header.
        let limit = u64::MAX - HEADER_LEN as u64;
        if self.payload_len > limit {
            return Err(Error::TooLarge {
                what: "seal record payload length",
                claimed: self.payload_len,
                limit,
            });
        }
        // The body length the payload implies (for ECB/CBC: padding of 1..16 bytes).
        let (body_lo, body_hi) = match self.cipher {
            Cipher::None | Cipher::Ctr => (self.payload_len, self.payload_len),
            Cipher::Gcm => {
                if self.payload_len < GCM_TAG as u64 {
                    return Err(Error::BadHeader {
                        field: "payload length",
                        detail: format!("{} is shorter than the GCM tag", self.payload_len),
                    });
                }
                (self.payload_len - 16, self.payload_len - 16)
            }
            Cipher::Ecb | Cipher::Cbc => {
                if self.payload_len == 0 || !self.payload_len.is_multiple_of(16) {
                    return Err(Error::BadHeader {
                        field: "payload length",
                        detail: format!(
                            "{} is not a positive multiple of 16 for {}",
                            self.payload_len,
                            self.cipher.name()
                        ),
                    });
                }
                (self.payload_len - 16, self.payload_len - 1)
            }
        };
        if self.stored() {
            if !(body_lo..=body_hi).contains(&self.page_len) {
                return Err(Error::BadHeader {
                    field: "payload length",
                    detail: format!(
                        "{} does not fit a stored page of {} bytes",
                        self.payload_len, self.page_len
                    ),
                });
            }
        } else {
            if body_lo >= self.page_len {
                return Err(Error::BadHeader {
                    field: "payload length",
                    detail: format!(
                        "{} is not smaller than the page ({}) although the page is compressed",
                        self.payload_len, self.page_len
                    ),
                });
            }
            let most = body_hi.saturating_mul(Compression::max_ratio(self.compression));
            if self.page_len > most {
                return Err(Error::BadHeader {
                    field: "page length",
                    detail: format!(
                        "{} bytes cannot come from a {}-byte compressed body",
                        self.page_len, body_hi
                    ),
                });
            }
        }
        Ok(())
    }
}

/// With the `isal` feature, DEFLATE level 1 pages of at least this size go through ISA-L.
/// Its per-call setup makes it slower than zlib-rs on smaller pages and faster from 8 KiB up
/// (TPC-H text, one core; `bench/seal.py` measures both).
#[cfg(feature = "isal")]
const ISAL_MIN_PAGE: usize = 8 << 10;

/// Zero bytes after the copy of a page ISA-L compresses. In CI, on a CPU we could not get here,
/// the `isal` build sealed the same page to different records in two runs (the test
/// `batch_is_byte_identical_to_page_by_page_for_any_thread_count`). ISA-L's vector match
/// finders load whole registers near the end of the input, so the likely cause is output that
/// depends on the bytes after the page (another thread's heap data, or a mapping's end). From
/// a copy with zeros after it, the output can depend on the page alone and no load can leave
/// the buffer; the copy costs far less than the compression.
#[cfg(feature = "isal")]
const ISAL_PAD: usize = 256;

/// Per-thread codec state reused across pages (compression contexts are not free to make).
#[derive(Default)]
pub struct Workspace {
    /// The decrypted body of a compressed record, reused across records.
    body: Vec<u8>,
    deflate: Option<(u8, libdeflater::Compressor)>,
    inflate: Option<libdeflater::Decompressor>,
    zstd_c: Option<(i8, zstd::bulk::Compressor<'static>)>,
    zstd_d: Option<zstd::bulk::Decompressor<'static>>,
    snap_e: Option<snap::raw::Encoder>,
    snap_d: Option<snap::raw::Decoder>,
    /// The page ISA-L compresses, followed by [`ISAL_PAD`] zero bytes.
    #[cfg(feature = "isal")]
    isal_in: Vec<u8>,
}

impl Workspace {
    /// An empty workspace; contexts are made on first use.
    pub fn new() -> Workspace {
        Workspace::default()
    }

    /// Compresses `page` into `out` (which has room for the bound). Returns the body length, or
    /// `None` when the compressed form would not be smaller than the page.
    fn compress(
        &mut self,
        compression: Compression,
        page: &[u8],
        out: &mut [u8],
    ) -> Result<Option<usize>> {
        let internal = |what: &'static str, e: &dyn std::fmt::Display| Error::Internal {
            what,
            detail: e.to_string(),
        };
        let n = match compression {
            Compression::None => return Ok(None),
            #[cfg(feature = "isal")]
            Compression::Deflate(1) if page.len() >= ISAL_MIN_PAGE => {
                // ISA-L's igzip level 1: standard raw DEFLATE, faster than libdeflate level 1
                // on pages this large. An output that does not fit the bound cannot pay: store.
                // It reads a zero-padded copy of the page (see `ISAL_PAD`).
                self.isal_in.clear();
                self.isal_in.extend_from_slice(page);
                self.isal_in.resize(page.len() + ISAL_PAD, 0);
                match isal::compress_into(
                    &self.isal_in[..page.len()],
                    out,
                    isal::CompressionLevel::One,
                    isal::Codec::Deflate,
                ) {
                    Ok(n) => n,
                    Err(isal::error::Error::CompressionError(
                        isal::CompCode::StatelessOverflow,
                    )) => return Ok(None),
                    Err(e) => return Err(internal("deflate (isa-l)", &e)),
                }
            }
            // Level 0 stores: the page goes in raw, as a stored DEFLATE stream never pays.
            Compression::Deflate(0) => return Ok(None),
            Compression::Deflate(level) => {
                // libdeflate: whole-buffer DEFLATE, which pages are. At every level 1-9 its
                // output is at least as small as zlib's on the benchmark text, and faster
                // (docs/seal.md, "DEFLATE levels"); zlib-rs's level 1 (deflate_quick) is not.
                let comp = match &mut self.deflate {
                    Some((l, c)) if *l == level => c,
                    slot => {
                        let lvl = libdeflater::CompressionLvl::new(i32::from(level))
                            .map_err(|e| internal("deflate", &format!("{e:?}")))?;
                        &mut slot.insert((level, libdeflater::Compressor::new(lvl))).1
                    }
                };
                match comp.deflate_compress(page, out) {
                    Ok(n) => n,
                    // No room within the page's length: the page is stored raw.
                    Err(libdeflater::CompressionError::InsufficientSpace) => return Ok(None),
                }
            }
            Compression::Lz4 => {
                lz4_flex::block::compress_into(page, out).map_err(|e| internal("lz4", &e))?
            }
            Compression::Zstd(level) => {
                let comp = match &mut self.zstd_c {
                    Some((l, c)) if *l == level => c,
                    slot => {
                        let mut c = zstd::bulk::Compressor::new(i32::from(level))
                            .map_err(|e| internal("zstd", &e))?;
                        c.include_checksum(false)
                            .map_err(|e| internal("zstd", &e))?;
                        &mut slot.insert((level, c)).1
                    }
                };
                comp.compress_to_buffer(page, out)
                    .map_err(|e| internal("zstd", &e))?
            }
            Compression::Snappy => {
                let enc = self.snap_e.get_or_insert_with(snap::raw::Encoder::new);
                enc.compress(page, out)
                    .map_err(|e| internal("snappy", &e))?
            }
        };
        Ok((n < page.len()).then_some(n))
    }

    /// Room a codec needs for its output.
    fn bound(compression: Compression, len: usize) -> usize {
        match compression {
            Compression::None => 0,
            // Room for the page's own length: an output that does not fit is stored raw
            // anyway (ISA-L reports an overflow, libdeflate InsufficientSpace).
            Compression::Deflate(_) => len,
            Compression::Lz4 => lz4_flex::block::get_maximum_output_size(len),
            Compression::Zstd(_) => zstd::zstd_safe::compress_bound(len),
            Compression::Snappy => snap::raw::max_compress_len(len),
        }
    }

    /// Decompresses `body` (codec `code`) into exactly `page_len` bytes.
    /// `page` is a buffer to reuse; only bytes beyond its old length are zero-filled first.
    fn decompress(
        &mut self,
        code: u8,
        body: &[u8],
        page_len: usize,
        page: &mut Vec<u8>,
    ) -> Result<()> {
        let fail = |format: &'static str, detail: String| Error::Corrupt { format, detail };
        if page.len() > page_len {
            page.truncate(page_len);
        } else {
            page.resize(page_len, 0);
        }
        let n = match code {
            1 => {
                let d = self
                    .inflate
                    .get_or_insert_with(libdeflater::Decompressor::new);
                // The page length is known, so the whole body decodes in one call; a stream
                // that needs more room, or ends early, is damaged.
                d.deflate_decompress(body, page).map_err(|e| {
                    fail(
                        "deflate",
                        match e {
                            libdeflater::DecompressionError::BadData => {
                                "the DEFLATE stream is damaged".to_string()
                            }
                            libdeflater::DecompressionError::InsufficientSpace => {
                                "the DEFLATE stream does not end within the page length".to_string()
                            }
                        },
                    )
                })?
            }
            2 => lz4_flex::block::decompress_into(body, page)
                .map_err(|e| fail("lz4", e.to_string()))?,
            3 => {
                let d = match &mut self.zstd_d {
                    Some(d) => d,
                    slot => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| {
                        Error::Internal {
                            what: "zstd",
                            detail: e.to_string(),
                        }
                    })?),
                };
                page.clear();
                page.reserve(page_len);
                d.decompress_to_buffer(body, page)
                    .map_err(|e| fail("zstd", e.to_string()))?
            }
            4 => {
                let len =
                    snap::raw::decompress_len(body).map_err(|e| fail("snappy", e.to_string()))?;
                if len != page_len {
                    return Err(fail(
                        "snappy",
                        format!("body decodes to {len} bytes, the header says {page_len}"),
                    ));
                }
                let d = self.snap_d.get_or_insert_with(snap::raw::Decoder::new);
                d.decompress(body, page)
                    .map_err(|e| fail("snappy", e.to_string()))?
            }
            _ => unreachable!("codes checked by Header::parse"),
        };
        if n != page_len {
            return Err(fail(
                "page body",
                format!("decodes to {n} bytes, the header says {page_len}"),
            ));
        }
        page.truncate(n);
        Ok(())
    }
}

/// A nonce block for one record.
#[derive(Clone, Copy, Debug)]
struct Nonce([u8; 16]);

/// Seals pages with one configuration and one key.
pub struct Sealer {
    config: SealConfig,
    key_id: u32,
    aes: Option<AnyAes>,
    gcm: Option<Gcm>,
    prefix: [u8; 8],
    counter: u64,
    workspace: Workspace,
}

impl Sealer {
    /// A sealer for `config`; `key` (with its id) is required unless the cipher is `None`. The
    /// nonce prefix comes from the operating system's random source.
    pub fn new(config: SealConfig, key: Option<(u32, &Key)>) -> Result<Sealer> {
        let mut prefix = [0u8; 8];
        getrandom::fill(&mut prefix).map_err(|e| Error::Internal {
            what: "reading OS randomness",
            detail: e.to_string(),
        })?;
        Sealer::with_nonce_prefix(config, key, prefix)
    }

    /// As [`Sealer::new`] with a given nonce prefix, for reproducible output (tests,
    /// benchmarks). Never seal twice with the same key and prefix: CTR and GCM lose all
    /// confidentiality when a nonce repeats.
    pub fn with_nonce_prefix(
        config: SealConfig,
        key: Option<(u32, &Key)>,
        prefix: [u8; 8],
    ) -> Result<Sealer> {
        // The chosen kernel is always one that may run, so this never fails for the kernel.
        Sealer::with_kernel(config, key, prefix, kernel::aes_kernel())
    }

    /// As [`Sealer::with_nonce_prefix`] on one particular AES kernel instead of the one
    /// [`kernel::aes_kernel`] picks: for tests and benchmarks that compare kernels through the
    /// page layer (every kernel gives the same records). An error when that kernel may not
    /// run here ([`kernel::AesKernel::allowed`]).
    #[doc(hidden)]
    pub fn with_kernel(
        config: SealConfig,
        key: Option<(u32, &Key)>,
        prefix: [u8; 8],
        kernel: kernel::AesKernel,
    ) -> Result<Sealer> {
        if !kernel.allowed() {
            return Err(kernel_refused(kernel));
        }
        if let Compression::Deflate(l) = config.compression {
            if l > 9 {
                return Err(Error::parameter("deflate level", l, "0 to 9"));
            }
        }
        if let Compression::Zstd(l) = config.compression {
            if !(1..=22).contains(&l) {
                return Err(Error::parameter("zstd level", l, "1 to 22"));
            }
        }
        let (key_id, aes, gcm) = match (config.cipher, key) {
            (Cipher::None, _) => (key.map_or(0, |(id, _)| id), None, None),
            (cipher, None) => {
                return Err(Error::parameter(
                    "key",
                    "none",
                    format!("a key for cipher {}", cipher.name()),
                ))
            }
            (Cipher::Gcm, Some((id, key))) => {
                if key.len() != 32 {
                    return Err(Error::KeySize {
                        id,
                        found: key.len(),
                        expected: "aes256-gcm".into(),
                        needed: 32,
                    });
                }
                let gcm = Gcm::with_kernel(key, kernel)?.ok_or_else(|| kernel_refused(kernel))?;
                (id, None, Some(gcm))
            }
            (_, Some((id, key))) => {
                let aes = AnyAes::with_kernel(key, kernel).ok_or_else(|| kernel_refused(kernel))?;
                (id, Some(aes), None)
            }
        };
        Ok(Sealer {
            config,
            key_id,
            aes,
            gcm,
            prefix,
            counter: 0,
            workspace: Workspace::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> SealConfig {
        self.config
    }

    /// The next record's nonce block; draws a new prefix every 2^32 records.
    fn next_nonce(&mut self) -> Result<Nonce> {
        if self.counter >= 1 << 32 {
            getrandom::fill(&mut self.prefix).map_err(|e| Error::Internal {
                what: "reading OS randomness",
                detail: e.to_string(),
            })?;
            self.counter = 0;
        }
        let mut block = [0u8; 16];
        block[..8].copy_from_slice(&self.prefix);
        block[8..12].copy_from_slice(&(self.counter as u32).to_be_bytes());
        self.counter += 1;
        Ok(Nonce(block))
    }

    /// Seals one page into a record.
    pub fn seal(&mut self, page: &[u8]) -> Result<Vec<u8>> {
        let mut record = Vec::new();
        self.seal_into(page, &mut record)?;
        Ok(record)
    }

    /// Seals one page into `record`, replacing its contents and reusing its memory: the way to
    /// seal a stream of pages without a fresh allocation (and its first-touch page faults) per
    /// page. The bytes are the same as [`Sealer::seal`]'s.
    pub fn seal_into(&mut self, page: &[u8], record: &mut Vec<u8>) -> Result<()> {
        let nonce = self.next_nonce()?;
        let mut ws = std::mem::take(&mut self.workspace);
        let result = self.seal_with(page, nonce, &mut ws, std::mem::take(record));
        self.workspace = ws;
        *record = result?;
        Ok(())
    }

    fn seal_with(
        &self,
        page: &[u8],
        nonce: Nonce,
        ws: &mut Workspace,
        buf: Vec<u8>,
    ) -> Result<Vec<u8>> {
        let mut rec = self.prepare(page, nonce, ws, buf)?;
        if self.config.cipher == Cipher::Cbc {
            let aes = self.aes.as_ref().expect("cbc has a key");
            let iv = rec.iv;
            aes::cbc_encrypt(aes, &iv, &mut rec.buf[HEADER_LEN..]);
        }
        Ok(self.complete(rec))
    }

    /// Compresses, pads and (except CBC, which the caller does, possibly for several pages at
    /// once) encrypts one page into a record buffer whose header is filled in by `complete`.
    /// `buf` is a buffer to reuse (its contents are overwritten).
    fn prepare(
        &self,
        page: &[u8],
        nonce: Nonce,
        ws: &mut Workspace,
        mut buf: Vec<u8>,
    ) -> Result<Prepared> {
        let cipher = self.config.cipher;
        let extra = if cipher.padded() || cipher == Cipher::Gcm {
            16
        } else {
            0
        };
        let bound = Workspace::bound(self.config.compression, page.len());
        let room = HEADER_LEN + bound.max(page.len()) + extra;
        buf.reserve(room.saturating_sub(buf.len()));
        let mut stored = true;
        if self.config.compression != Compression::None {
            // Only bytes beyond the buffer's old length are zero-filled: the codec overwrites
            // what it uses and the rest is cut off.
            if buf.len() > HEADER_LEN + bound {
                buf.truncate(HEADER_LEN + bound);
            } else {
                buf.resize(HEADER_LEN + bound, 0);
            }
            match ws.compress(self.config.compression, page, &mut buf[HEADER_LEN..])? {
                Some(n) => {
                    buf.truncate(HEADER_LEN + n);
                    stored = false;
                }
                None => buf.truncate(HEADER_LEN),
            }
        }
        // A stored page is copied in one pass that also computes its CRC, in chunks that stay
        // in the L1 cache; in the CTR tier the same pass encrypts it and computes the payload
        // CRC (in the other tiers `complete` computes that after encryption).
        let fused = stored && cipher == Cipher::Ctr;
        let mut payload_crc = None;
        let page_crc = if stored {
            // Reused memory is not zero-filled first; the copy overwrites it.
            if buf.len() > HEADER_LEN + page.len() {
                buf.truncate(HEADER_LEN + page.len());
            } else {
                buf.resize(HEADER_LEN + page.len(), 0);
            }
            let ctr = if fused { self.aes.as_ref() } else { None };
            let (page_crc, crc) = fused_copy(ctr, &nonce.0, page, &mut buf[HEADER_LEN..]);
            if matches!(cipher, Cipher::None | Cipher::Ctr) {
                payload_crc = Some(crc);
            }
            if cipher == Cipher::Gcm {
                0
            } else {
                page_crc
            }
        } else if cipher == Cipher::Gcm {
            0
        } else {
            bulk_crc32c(page)
        };
        let iv = match cipher {
            Cipher::None | Cipher::Ecb => [0u8; 16],
            Cipher::Ctr => nonce.0,
            Cipher::Gcm => nonce.0,
            Cipher::Cbc => {
                let mut block = aes::Block::from(nonce.0);
                self.aes
                    .as_ref()
                    .expect("cbc has a key")
                    .encrypt_blocks(std::slice::from_mut(&mut block));
                block.into()
            }
        };
        if cipher.padded() {
            aes::pkcs7_pad(&mut buf);
        }
        let mut header = Header {
            version: VERSION,
            compression: if stored && self.config.compression == Compression::None {
                0
            } else {
                self.config.compression.code()
            },
            level: self.config.compression.level(),
            cipher,
            key_len: match cipher {
                Cipher::None => 0,
                Cipher::Gcm => 32,
                _ => (self.aes.as_ref().expect("key").bits() / 8) as u8,
            },
            flags: (if stored && self.config.compression != Compression::None {
                FLAG_STORED
            } else {
                0
            }) | if cipher.padded() { FLAG_PADDED } else { 0 },
            key_id: if cipher == Cipher::None {
                0
            } else {
                self.key_id
            },
            page_len: page.len() as u64,
            payload_len: (buf.len() - HEADER_LEN + if cipher == Cipher::Gcm { GCM_TAG } else { 0 })
                as u64,
            iv,
            page_crc,
            payload_crc: 0,
        };
        if header.compression == 0 {
            header.level = 0;
        }
        match cipher {
            Cipher::None | Cipher::Cbc => {}
            Cipher::Ecb => {
                aes::ecb_encrypt(self.aes.as_ref().expect("key"), &mut buf[HEADER_LEN..])
            }
            Cipher::Ctr if fused => {}
            Cipher::Ctr => {
                aes::ctr_apply(self.aes.as_ref().expect("key"), &iv, &mut buf[HEADER_LEN..])
            }
            Cipher::Gcm => {
                let aad = header.to_bytes();
                let gcm = self.gcm.as_ref().expect("gcm key");
                let nonce: [u8; 12] = iv[..12].try_into().expect("12 bytes");
                let tag = gcm.encrypt(&nonce, &aad[..48], &mut buf[HEADER_LEN..])?;
                buf.extend_from_slice(&tag);
            }
        }
        Ok(Prepared {
            buf,
            header,
            iv,
            payload_crc,
        })
    }

    /// Fills in the payload CRC and the header.
    fn complete(&self, mut rec: Prepared) -> Vec<u8> {
        rec.header.payload_crc = rec
            .payload_crc
            .unwrap_or_else(|| bulk_crc32c(&rec.buf[HEADER_LEN..]));
        rec.buf[..HEADER_LEN].copy_from_slice(&rec.header.to_bytes());
        rec.buf
    }

    /// Seals `pages` on `threads` threads. Nonces are assigned in page order first, so the
    /// records are byte-identical to sealing the pages one by one with [`Sealer::seal`], for
    /// any thread count. CBC encryption interleaves up to 16 pages per thread
    /// ([`kernel::cbc_encrypt_lanes`]).
    pub fn seal_batch(&mut self, pages: &[&[u8]], threads: usize) -> Result<Vec<Vec<u8>>> {
        let mut records = Vec::new();
        self.seal_batch_into(pages, &mut records, threads)?;
        Ok(records)
    }

    /// As [`Sealer::seal_batch`], writing record `i` into `records[i]` (`records` is resized to
    /// the number of pages) and reusing the memory of the buffers already there, so that a
    /// caller sealing batch after batch allocates (and first-touches) no new memory. The bytes
    /// are the same as [`Sealer::seal_batch`]'s. On error the contents of `records` are
    /// unspecified.
    pub fn seal_batch_into(
        &mut self,
        pages: &[&[u8]],
        records: &mut Vec<Vec<u8>>,
        threads: usize,
    ) -> Result<()> {
        let nonces: Vec<Nonce> = (0..pages.len())
            .map(|_| self.next_nonce())
            .collect::<Result<_>>()?;
        records.resize_with(pages.len(), Vec::new);
        let buffers: Vec<Mutex<Vec<u8>>> = records.drain(..).map(Mutex::new).collect();
        let take = |i: usize| std::mem::take(&mut *lock(&buffers[i]));
        let this = &*self;
        if self.config.cipher != Cipher::Cbc {
            let outputs = for_each_group(pages.len(), threads, |i, ws| {
                this.seal_with(pages[i], nonces[i], ws, take(i))
            });
            for record in outputs {
                records.push(record?);
            }
            return Ok(());
        }
        // CBC: encrypt groups of up to `kernel::LANES` payloads of similar length (longest
        // first) side by side, so that the lanes of a group run together for most of their
        // length. Without compression the payload length follows from the page length and a
        // group prepares (copies, pads) its own pages, which keeps them in cache; with
        // compression every page is compressed first (in parallel: that is most of the work,
        // and it balances best page by page), then grouped by compressed length. Only the
        // schedule depends on this; each record's bytes depend on its page and nonce alone.
        let prepared: Vec<Mutex<Option<Result<Prepared>>>> =
            (0..pages.len()).map(|_| Mutex::new(None)).collect();
        let two_phase = self.config.compression != Compression::None;
        let mut order: Vec<(usize, usize)> = if two_phase {
            for_each_group(pages.len(), threads, |i, ws| {
                *lock(&prepared[i]) = Some(this.prepare(pages[i], nonces[i], ws, take(i)));
            });
            (0..pages.len())
                .filter_map(|i| match &*lock(&prepared[i]) {
                    Some(Ok(p)) => Some((i, p.buf.len())),
                    _ => None,
                })
                .collect()
        } else {
            (0..pages.len()).map(|i| (i, pages[i].len())).collect()
        };
        order.sort_by_key(|&(_, len)| std::cmp::Reverse(len));
        let order: Vec<usize> = order.into_iter().map(|(i, _)| i).collect();
        let groups: Vec<&[usize]> = order.chunks(kernel::LANES).collect();
        let aes = self.aes.as_ref().expect("cbc has a key");
        let sealed: Vec<Vec<(usize, Vec<u8>)>> = for_each_group(groups.len(), threads, |g, ws| {
            let mut recs: Vec<(usize, Prepared)> = Vec::with_capacity(groups[g].len());
            for &i in groups[g] {
                let p = if two_phase {
                    lock(&prepared[i]).take()
                } else {
                    Some(this.prepare(pages[i], nonces[i], ws, take(i)))
                };
                match p {
                    Some(Ok(p)) => recs.push((i, p)),
                    Some(Err(e)) => *lock(&prepared[i]) = Some(Err(e)),
                    None => {}
                }
            }
            let mut lanes: Vec<(aes::Block, &mut [u8])> = recs
                .iter_mut()
                .map(|(_, p)| (aes::Block::from(p.iv), &mut p.buf[HEADER_LEN..]))
                .collect();
            kernel::cbc_encrypt_lanes(aes, &mut lanes);
            drop(lanes);
            recs.into_iter()
                .map(|(i, p)| (i, this.complete(p)))
                .collect()
        });
        // Back in page order; the first failure (in page order) is the error.
        let mut slots: Vec<Option<Vec<u8>>> = (0..pages.len()).map(|_| None).collect();
        for (i, record) in sealed.into_iter().flatten() {
            slots[i] = Some(record);
        }
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Some(record) => records.push(record),
                None => {
                    return Err(match lock(&prepared[i]).take() {
                        Some(Err(e)) => e,
                        _ => Error::Internal {
                            what: "seal batch",
                            detail: format!("page {i} was not sealed"),
                        },
                    })
                }
            }
        }
        Ok(())
    }
}

struct Prepared {
    buf: Vec<u8>,
    header: Header,
    iv: [u8; 16],
    /// The payload CRC when it was computed on the way (else `complete` computes it).
    payload_crc: Option<u32>,
}

/// Copies `src` to `dst` (same length), CTR-encrypting it with `aes` from counter block `iv`
/// when a key is given, in chunks small enough to stay in the L1 cache between the steps;
/// returns the CRC-32Cs of `src` and of `dst`. One pass over memory instead of four (CRC,
/// copy, CTR, CRC).
fn fused_copy(aes: Option<&AnyAes>, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) -> (u32, u32) {
    const CHUNK: usize = 16 << 10;
    let mut counter = u128::from_be_bytes(*iv);
    let mut src_crc = kernel::Crc32cDigest::new();
    let mut dst_crc = kernel::Crc32cDigest::new();
    for (s, d) in src.chunks(CHUNK).zip(dst.chunks_mut(CHUNK)) {
        src_crc.update(s);
        match aes {
            Some(aes) => {
                kernel::ctr_apply_to(aes, &counter.to_be_bytes(), s, d);
                dst_crc.update(d);
            }
            None => d.copy_from_slice(s),
        }
        counter = counter.wrapping_add((CHUNK / 16) as u128);
    }
    let src_crc = src_crc.finalize();
    let dst_crc = if aes.is_none() {
        src_crc
    } else {
        dst_crc.finalize()
    };
    (src_crc, dst_crc)
}

/// CRC-32C (Castagnoli) of a page or payload, by the library the CPU runs fastest
/// ([`crate::kernel::crc32c_bulk`]); the header CRC (60 bytes) uses `crc32c::crc32c`.
fn bulk_crc32c(data: &[u8]) -> u32 {
    crate::kernel::crc32c_bulk(data)
}

/// The error for a sealer asked for an AES kernel that may not run here.
fn kernel_refused(kernel: kernel::AesKernel) -> Error {
    Error::parameter(
        "aes kernel",
        kernel.name(),
        "a kernel this CPU has within INPATH_ISA / INPATH_AES",
    )
}

/// The error for a plain record whose page CRC does not match: damage.
fn page_crc_damage(stored: u32, computed: u32) -> Error {
    Error::corrupt(
        "seal record",
        format!("page CRC-32C is {stored:08x}, computed {computed:08x}"),
    )
}

/// The error for a GCM record whose tag failed: damage when the payload's CRC (unkeyed, so it
/// cannot vouch for anything, only point at corruption) does not match, else a wrong key or a
/// forgery.
fn gcm_refused(h: &Header, payload: &[u8]) -> Error {
    let computed = bulk_crc32c(payload);
    if computed != h.payload_crc {
        return Error::PayloadChecksum {
            stored: h.payload_crc,
            computed,
        };
    }
    Error::AuthenticationFailed { key_id: h.key_id }
}

/// Opens records with keys from a [`KeyRing`].
pub struct Unsealer {
    keys: HashMap<u32, (AnyAes, Option<Gcm>)>,
    ring_ids: String,
    max_page: u64,
}

impl Unsealer {
    /// An unsealer over `keys` (expanded once, here), accepting pages up to
    /// [`DEFAULT_MAX_PAGE`].
    pub fn new(ring: &KeyRing) -> Unsealer {
        // The chosen kernel may always run, and the library always can (as `AnyAes::new`).
        Unsealer::with_kernel(ring, kernel::aes_kernel())
            .or_else(|| Unsealer::with_kernel(ring, kernel::AesKernel::Library))
            .expect("the library kernel always runs")
    }

    /// As [`Unsealer::new`] on one particular AES kernel instead of the one
    /// [`kernel::aes_kernel`] picks: for tests and benchmarks that compare kernels through the
    /// page layer. `None` when that kernel may not run here ([`kernel::AesKernel::allowed`]).
    #[doc(hidden)]
    pub fn with_kernel(ring: &KeyRing, kernel: kernel::AesKernel) -> Option<Unsealer> {
        if !kernel.allowed() {
            return None;
        }
        let mut keys = HashMap::new();
        for id in ring.ids() {
            let key = ring.get(id).expect("id from the ring");
            let gcm = if key.len() == 32 {
                Some(Gcm::with_kernel(key, kernel).expect("32-byte key")?)
            } else {
                None
            };
            keys.insert(id, (AnyAes::with_kernel(key, kernel)?, gcm));
        }
        let ids: Vec<String> = ring.ids().map(|id| id.to_string()).collect();
        let ring_ids = if ids.is_empty() {
            "no keys".into()
        } else {
            format!("id(s) {}", ids.join(", "))
        };
        Some(Unsealer {
            keys,
            ring_ids,
            max_page: DEFAULT_MAX_PAGE,
        })
    }

    /// Sets the largest page length accepted; larger claims are [`Error::TooLarge`].
    pub fn with_max_page(mut self, max_page: u64) -> Unsealer {
        self.max_page = max_page;
        self
    }

    /// Opens exactly one record (bytes after it are [`Error::TrailingData`]).
    pub fn unseal(&self, record: &[u8]) -> Result<Vec<u8>> {
        let (page, used) = self.unseal_prefix(record, &mut Workspace::new())?;
        if used != record.len() {
            return Err(Error::TrailingData {
                format: "seal record",
                bytes: (record.len() - used) as u64,
            });
        }
        Ok(page)
    }

    /// Opens exactly one record, as [`Unsealer::unseal`], without copying where it can: a
    /// record that stores its page as it is (no compression, no cipher) gives the page as a
    /// slice of `record` once its CRCs check; any other is opened into `page` (its memory
    /// reused; on error it is left empty).
    pub fn unseal_in<'a>(&self, record: &'a [u8], page: &'a mut Vec<u8>) -> Result<&'a [u8]> {
        let h = Header::parse(record, self.max_page)?;
        if h.stored() && h.cipher == Cipher::None && h.record_len() == record.len() as u64 {
            let payload = &record[HEADER_LEN..];
            let computed = bulk_crc32c(payload);
            if computed != h.payload_crc {
                return Err(Error::PayloadChecksum {
                    stored: h.payload_crc,
                    computed,
                });
            }
            if computed != h.page_crc {
                return Err(page_crc_damage(h.page_crc, computed));
            }
            return Ok(payload);
        }
        let used = self.unseal_prefix_into(record, &mut Workspace::new(), page)?;
        if used != record.len() {
            page.clear();
            return Err(Error::TrailingData {
                format: "seal record",
                bytes: (record.len() - used) as u64,
            });
        }
        Ok(page)
    }

    /// Opens the record at the start of `bytes`; returns the page and the record's length.
    pub fn unseal_prefix(&self, bytes: &[u8], ws: &mut Workspace) -> Result<(Vec<u8>, usize)> {
        let mut page = Vec::new();
        let used = self.unseal_prefix_into(bytes, ws, &mut page)?;
        Ok((page, used))
    }

    /// As [`Unsealer::unseal_prefix`], writing the page into `page` (replacing its contents and
    /// reusing its memory); returns the record's length. On error `page` is left empty.
    pub fn unseal_prefix_into(
        &self,
        bytes: &[u8],
        ws: &mut Workspace,
        page: &mut Vec<u8>,
    ) -> Result<usize> {
        let result = self.open_into(bytes, ws, page);
        if result.is_err() {
            page.clear();
        }
        result
    }

    fn open_into(&self, bytes: &[u8], ws: &mut Workspace, page: &mut Vec<u8>) -> Result<usize> {
        let h = Header::parse(bytes, self.max_page)?;
        let total = h.record_len();
        if (bytes.len() as u64) < total {
            return Err(Error::Truncated {
                what: "seal record payload",
                needed: total,
                available: bytes.len() as u64,
            });
        }
        let total = total as usize;
        let payload = &bytes[HEADER_LEN..total];
        let keys = if h.cipher == Cipher::None {
            None
        } else {
            let (aes, gcm) = self
                .keys
                .get(&h.key_id)
                .ok_or_else(|| Error::UnknownKeyId {
                    id: h.key_id,
                    available: self.ring_ids.clone(),
                })?;
            let needed = usize::from(h.key_len);
            if (aes.bits() / 8) as usize != needed {
                return Err(Error::KeySize {
                    id: h.key_id,
                    found: (aes.bits() / 8) as usize,
                    expected: h.cipher_name(),
                    needed,
                });
            }
            Some((aes, gcm))
        };
        let wrong_key = |detail: String| Error::WrongKey {
            key_id: h.key_id,
            detail,
        };
        let page_crc = if h.stored() && matches!(h.cipher, Cipher::None | Cipher::Ctr) {
            // The body is the page: copy (and decrypt) it in one pass, both CRCs on the way.
            if page.len() > payload.len() {
                page.truncate(payload.len());
            } else {
                page.resize(payload.len(), 0);
            }
            let (payload_crc, page_crc) =
                fused_copy(keys.map(|(aes, _)| aes), &h.iv, payload, page);
            if payload_crc != h.payload_crc {
                return Err(Error::PayloadChecksum {
                    stored: h.payload_crc,
                    computed: payload_crc,
                });
            }
            Some(page_crc)
        } else if h.stored() && h.cipher == Cipher::Gcm {
            // The body is the page: decrypted from the record straight into it, one pass. GCM's
            // tag authenticates the payload, so its CRC is computed only when the tag fails.
            let Some((gcm, tag_at)) = keys
                .and_then(|(_, gcm)| gcm.as_ref())
                .zip(payload.len().checked_sub(GCM_TAG))
            else {
                unreachable!("key lengths and the GCM payload length checked above")
            };
            let tag: [u8; 16] = payload[tag_at..].try_into().expect("16 bytes");
            page.resize(tag_at, 0);
            let aad = h.to_bytes();
            let nonce: [u8; 12] = h.iv[..12].try_into().expect("12 bytes");
            if !gcm.decrypt_to(&nonce, &aad[..48], &payload[..tag_at], page, &tag) {
                return Err(gcm_refused(&h, payload));
            }
            if tag_at as u64 != h.page_len {
                return Err(wrong_key(format!(
                    "stored body is {tag_at} bytes, the header says {}",
                    h.page_len
                )));
            }
            None
        } else {
            // GCM authenticates the payload: its CRC only tells damage from a wrong key once
            // the tag has failed.
            if h.cipher != Cipher::Gcm {
                let computed = bulk_crc32c(payload);
                if computed != h.payload_crc {
                    return Err(Error::PayloadChecksum {
                        stored: h.payload_crc,
                        computed,
                    });
                }
            }
            // Decrypt a copy of the payload: in the page buffer when the body is the page, else in
            // the workspace's body buffer.
            let mut body = if h.stored() {
                std::mem::take(page)
            } else {
                std::mem::take(&mut ws.body)
            };
            body.clear();
            body.extend_from_slice(payload);
            match (h.cipher, keys) {
                (Cipher::None, _) => {}
                (Cipher::Ecb, Some((aes, _))) => aes::ecb_decrypt(aes, &mut body),
                (Cipher::Cbc, Some((aes, _))) => aes::cbc_decrypt(aes, &h.iv, &mut body),
                (Cipher::Ctr, Some((aes, _))) => aes::ctr_apply(aes, &h.iv, &mut body),
                (Cipher::Gcm, Some((_, Some(gcm)))) => {
                    let tag_at = body.len() - GCM_TAG;
                    let tag: [u8; 16] = body[tag_at..].try_into().expect("16 bytes");
                    body.truncate(tag_at);
                    let aad = h.to_bytes();
                    let nonce: [u8; 12] = h.iv[..12].try_into().expect("12 bytes");
                    if !gcm.decrypt(&nonce, &aad[..48], &mut body, &tag) {
                        return Err(gcm_refused(&h, payload));
                    }
                }
                _ => unreachable!("key lengths checked above"),
            }
            if h.cipher.padded() {
                match aes::pkcs7_unpadded_len(&body) {
                    Some(n) => body.truncate(n),
                    None => {
                        return Err(wrong_key(
                            "PKCS#7 padding is not valid after decryption".into(),
                        ))
                    }
                }
            }
            if h.stored() {
                if body.len() as u64 != h.page_len {
                    return Err(wrong_key(format!(
                        "stored body is {} bytes, the header says {}",
                        body.len(),
                        h.page_len
                    )));
                }
                *page = body;
            } else {
                let result = ws.decompress(h.compression, &body, h.page_len as usize, page);
                ws.body = body;
                match result {
                    Ok(()) => {}
                    Err(e) if h.cipher == Cipher::None => return Err(e),
                    Err(e) => {
                        return Err(wrong_key(format!(
                            "the decrypted body does not decompress: {e}"
                        )))
                    }
                }
            }
            None
        };
        if h.cipher != Cipher::Gcm {
            let computed = page_crc.unwrap_or_else(|| bulk_crc32c(page));
            if computed != h.page_crc {
                if h.cipher == Cipher::None {
                    return Err(page_crc_damage(h.page_crc, computed));
                }
                return Err(wrong_key(format!(
                    "page CRC-32C mismatch: stored {:08x}, computed {computed:08x}",
                    h.page_crc
                )));
            }
        }
        Ok(total)
    }

    /// Opens many records on `threads` threads; the result for record `i` is at index `i`.
    pub fn unseal_batch(&self, records: &[&[u8]], threads: usize) -> Vec<Result<Vec<u8>>> {
        let mut pages = Vec::new();
        let results = self.unseal_batch_into(records, &mut pages, threads);
        results
            .into_iter()
            .zip(pages)
            .map(|(r, page)| r.map(|()| page))
            .collect()
    }

    /// As [`Unsealer::unseal_batch`], writing page `i` into `pages[i]` (`pages` is resized to
    /// the number of records) and reusing the memory of the buffers already there. Result `i`
    /// says whether record `i` opened; where it did not, `pages[i]` is empty.
    pub fn unseal_batch_into(
        &self,
        records: &[&[u8]],
        pages: &mut Vec<Vec<u8>>,
        threads: usize,
    ) -> Vec<Result<()>> {
        pages.resize_with(records.len(), Vec::new);
        let buffers: Vec<Mutex<Vec<u8>>> = pages.drain(..).map(Mutex::new).collect();
        let one = |r: &[u8], ws: &mut Workspace, page: &mut Vec<u8>| -> Result<()> {
            let used = self.unseal_prefix_into(r, ws, page)?;
            if used != r.len() {
                page.clear();
                return Err(Error::TrailingData {
                    format: "seal record",
                    bytes: (r.len() - used) as u64,
                });
            }
            Ok(())
        };
        let outputs = for_each_group(records.len(), threads, |i, ws| {
            let mut page = std::mem::take(&mut *lock(&buffers[i]));
            let result = one(records[i], ws, &mut page);
            (result, page)
        });
        let mut results = Vec::with_capacity(records.len());
        for (result, page) in outputs {
            results.push(result);
            pages.push(page);
        }
        results
    }
}

/// Locks `m`, also after a panic elsewhere poisoned it (the data is a plain buffer).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work(g, workspace)` for every group `g` in `0..groups` on up to `threads` threads, each
/// with its own workspace, handing out groups from a shared counter (so uneven groups balance);
/// returns the outputs in group order, whatever thread ran them.
fn for_each_group<T: Send>(
    groups: usize,
    threads: usize,
    work: impl Fn(usize, &mut Workspace) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, groups.max(1));
    if threads == 1 {
        let mut ws = Workspace::new();
        return (0..groups).map(|g| work(g, &mut ws)).collect();
    }
    let next = AtomicUsize::new(0);
    let done: Vec<Vec<(usize, T)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut ws = Workspace::new();
                    let mut mine = Vec::new();
                    loop {
                        let g = next.fetch_add(1, Ordering::Relaxed);
                        if g >= groups {
                            break;
                        }
                        mine.push((g, work(g, &mut ws)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut slots: Vec<Option<T>> = (0..groups).map(|_| None).collect();
    for (g, output) in done.into_iter().flatten() {
        slots[g] = Some(output);
    }
    slots
        .into_iter()
        .map(|o| o.expect("every group ran"))
        .collect()
}
