//! The flash file: aligned buffers, O_DIRECT with a buffered fallback, the chunk header and the
//! checksummed log record (format in docs/FORMATS.md, "cache flash log").

pub use crate::aligned::{one_malloc_arena, release_free_memory, round_up, AlignedBuf, ALIGN};
use crate::error::{CacheError, Result};
use crate::types::{FlashFaults, SealHook};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Bytes at the start of each chunk holding its header; records follow.
pub const CHUNK_HEADER: usize = 64;
/// Bytes of a record header.
pub const REC_HEADER: usize = 40;
const CHUNK_MAGIC: &[u8; 8] = b"INPCHNK1";
const REC_MAGIC: u16 = 0xCA5E;

/// Record kinds in the log.
pub const KIND_SET: u8 = 1;
pub const KIND_DELETE: u8 = 2;
pub const KIND_FLUSH: u8 = 3;
/// A set whose item is stale (invalidated by `md I` or stored by `ms I`): read back as stale,
/// so `mg` keeps answering `X` after the item went to flash and returned.
pub const KIND_SET_STALE: u8 = 4;

/// Whether `kind` (without the sealed bit) is a set, stale or not.
pub fn is_set(kind: u8) -> bool {
    kind == KIND_SET || kind == KIND_SET_STALE
}
/// Added to KIND_SET / KIND_DELETE when key and value are sealed together in the value field
/// (at-rest protection; the key field is then empty).
pub const SEALED: u8 = 0x80;

/// The flash file, opened with O_DIRECT where the filesystem allows it.
pub struct FlashFile {
    file: File,
    /// Whether the page cache is bypassed (O_DIRECT accepted by the filesystem).
    pub direct: bool,
    /// Injected faults (tests).
    faults: Option<Arc<FlashFaults>>,
}

impl FlashFile {
    /// Opens (creating when missing) `path` and makes it `size` bytes long.
    pub fn open(path: &Path, size: u64) -> Result<FlashFile> {
        let io = |e: std::io::Error| CacheError::Flash {
            path: path.display().to_string(),
            source: e,
        };
        check_room(path, size)?;
        let buffered = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let len = buffered.metadata().map_err(io)?.len();
        if len != size {
            buffered.set_len(size).map_err(io)?;
        }
        // O_DIRECT is refused by some filesystems (tmpfs): then stay buffered and say so.
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path);
        match direct {
            Ok(file) => {
                // Some filesystems accept the flag at open and fail the first I/O: probe it.
                let mut probe = AlignedBuf::zeroed(ALIGN);
                if file.read_at(probe.as_mut_slice(), 0).is_ok() {
                    return Ok(FlashFile {
                        file,
                        direct: true,
                        faults: None,
                    });
                }
                Ok(FlashFile {
                    file: buffered,
                    direct: false,
                    faults: None,
                })
            }
            Err(_) => Ok(FlashFile {
                file: buffered,
                direct: false,
                faults: None,
            }),
        }
    }

    /// Reads `buf.len()` bytes at `offset` (both aligned) with one pread (retried on short reads).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if let Some(f) = &self.faults {
            if f.fail_reads.load(Relaxed) {
                return Err(std::io::Error::other("injected read fault"));
            }
        }
        self.file.read_exact_at(buf, offset)
    }

    pub fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if let Some(f) = &self.faults {
            let len = buf.len() as u64;
            let before = f.written.fetch_add(len, Relaxed);
            let limit = f.write_limit.load(Relaxed);
            if before.saturating_add(len) > limit {
                // Torn: the aligned part before the limit reaches the file, the rest does not.
                let part = (limit.saturating_sub(before) as usize) / ALIGN * ALIGN;
                if part > 0 {
                    self.file.write_all_at(&buf[..part], offset)?;
                }
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        self.file.write_all_at(buf, offset)
    }

    /// This file with these faults injected into its reads and writes (tests).
    pub fn with_faults(mut self, faults: Option<Arc<FlashFaults>>) -> FlashFile {
        self.faults = faults;
        self
    }

    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Zeroes the whole file (geometry change): truncate then extend.
    pub fn wipe(&self, size: u64) -> std::io::Result<()> {
        self.file.set_len(0)?;
        self.file.set_len(size)
    }
}

/// Refuses a flash file whose directory is missing, or whose size is more than the filesystem
/// has free (beyond what the file already takes): better at start than `ENOSPC` while serving.
fn check_room(path: &Path, size: u64) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| {
        CacheError::Config(format!(
            "flash file {}: its directory {} {}",
            path.display(),
            dir.display(),
            if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".to_string()
            } else {
                format!("cannot be read ({e})")
            }
        ))
    })?;
    if !meta.is_dir() {
        return Err(CacheError::Config(format!(
            "flash file {}: {} is not a directory",
            path.display(),
            dir.display()
        )));
    }
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(CacheError::Config(format!(
                "flash file {}: not a regular file",
                path.display()
            )));
        }
    }
    // Blocks the file already holds count as room (a restart on the same file).
    let held = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
    };
    if let Some(free) = free_bytes(dir) {
        if size > free.saturating_add(held) {
            return Err(CacheError::Config(format!(
                "flash file {}: size {size} bytes ({} GiB) is more than the {} bytes ({} GiB) \
                 free on its filesystem; give a size of at most {} bytes",
                path.display(),
                size >> 30,
                free + held,
                (free + held) >> 30,
                free + held
            )));
        }
    }
    Ok(())
}

/// Bytes an unprivileged writer may still allocate on the filesystem of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some((st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64))
}

/// Writes a chunk header for chunk number `no` into `buf[..CHUNK_HEADER]`.
pub fn write_chunk_header(buf: &mut [u8], no: u64, chunk_size: u64) {
    buf[..CHUNK_HEADER].fill(0);
    buf[0..8].copy_from_slice(CHUNK_MAGIC);
    buf[8..12].copy_from_slice(&1u32.to_le_bytes());
    buf[12..16].copy_from_slice(&0u32.to_le_bytes());
    buf[16..24].copy_from_slice(&no.to_le_bytes());
    buf[24..32].copy_from_slice(&chunk_size.to_le_bytes());
    let crc = crc32fast::hash(&buf[0..32]);
    buf[32..36].copy_from_slice(&crc.to_le_bytes());
}

/// The chunk number in a chunk header, when the header is intact and for this geometry.
pub fn read_chunk_header(buf: &[u8], chunk_size: u64) -> Option<u64> {
    if buf.len() < CHUNK_HEADER || &buf[0..8] != CHUNK_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(buf[32..36].try_into().ok()?);
    if crc != crc32fast::hash(&buf[0..32]) {
        return None;
    }
    let version = u32::from_le_bytes(buf[8..12].try_into().ok()?);
    let size = u64::from_le_bytes(buf[24..32].try_into().ok()?);
    if version != 1 || size != chunk_size {
        return None;
    }
    Some(u64::from_le_bytes(buf[16..24].try_into().ok()?))
}

/// A decoded log record (borrowing key and value from the buffer it was read from).
#[derive(Debug)]
pub struct Record<'a> {
    pub kind: u8,
    pub flags: u32,
    pub exptime: u32,
    pub cas: u64,
    pub addr: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Bytes a record with this key and value occupies in the log (8-byte aligned).
pub fn record_len(key_len: usize, value_len: usize) -> usize {
    round_up(REC_HEADER + key_len + value_len, 8)
}

/// Encodes a record at `out[..record_len]`; `addr` is its own virtual log address.
#[allow(clippy::too_many_arguments)]
pub fn encode_record(
    out: &mut [u8],
    kind: u8,
    flags: u32,
    exptime: u32,
    cas: u64,
    addr: u64,
    key: &[u8],
    value: &[u8],
) {
    let total = record_len(key.len(), value.len());
    let out = &mut out[..total];
    out[0..2].copy_from_slice(&REC_MAGIC.to_le_bytes());
    out[2] = kind;
    out[3] = key.len() as u8;
    out[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out[8..12].copy_from_slice(&flags.to_le_bytes());
    out[12..16].copy_from_slice(&exptime.to_le_bytes());
    out[16..24].copy_from_slice(&cas.to_le_bytes());
    out[24..32].copy_from_slice(&addr.to_le_bytes());
    out[32..40].fill(0);
    out[REC_HEADER..REC_HEADER + key.len()].copy_from_slice(key);
    let vstart = REC_HEADER + key.len();
    out[vstart..vstart + value.len()].copy_from_slice(value);
    out[vstart + value.len()..].fill(0);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&out[0..32]);
    hasher.update(&out[REC_HEADER..]);
    let crc = hasher.finalize();
    out[32..36].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes and verifies the record at the start of `buf` (magic, lengths, checksum). `None`
/// for anything damaged, torn or absent.
pub fn decode_record(buf: &[u8]) -> Option<Record<'_>> {
    if buf.len() < REC_HEADER || u16::from_le_bytes([buf[0], buf[1]]) != REC_MAGIC {
        return None;
    }
    let kind = buf[2];
    let key_len = buf[3] as usize;
    let value_len = u32::from_le_bytes(buf[4..8].try_into().ok()?) as usize;
    let total = record_len(key_len, value_len);
    let sealed =
        kind & SEALED != 0 && matches!(kind & !SEALED, KIND_SET | KIND_DELETE | KIND_SET_STALE);
    if !((KIND_SET..=KIND_SET_STALE).contains(&kind) || sealed)
        || total > buf.len()
        || (key_len == 0 && kind != KIND_FLUSH && !sealed)
        || (key_len != 0 && sealed)
    {
        return None;
    }
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&buf[0..32]);
    hasher.update(&buf[REC_HEADER..total]);
    let crc = u32::from_le_bytes(buf[32..36].try_into().ok()?);
    if crc != hasher.finalize() || buf[36..40] != [0; 4] {
        return None;
    }
    let vstart = REC_HEADER + key_len;
    Some(Record {
        kind,
        flags: u32::from_le_bytes(buf[8..12].try_into().ok()?),
        exptime: u32::from_le_bytes(buf[12..16].try_into().ok()?),
        cas: u64::from_le_bytes(buf[16..24].try_into().ok()?),
        addr: u64::from_le_bytes(buf[24..32].try_into().ok()?),
        key: &buf[REC_HEADER..vstart],
        value: &buf[vstart..vstart + value_len],
    })
}

/// A record's kind, key and value, unsealed when sealed (`None` when it does not authenticate,
/// or is sealed while no seal is configured, or the other way round).
pub(crate) fn open_record(
    seal: Option<&SealHook>,
    rec: &Record<'_>,
) -> Option<(u8, Vec<u8>, Vec<u8>)> {
    let sealed = rec.kind & SEALED != 0;
    match (seal, sealed) {
        (None, false) | (Some(_), false) if rec.kind == KIND_FLUSH => {
            Some((rec.kind, Vec::new(), Vec::new()))
        }
        (None, false) => Some((rec.kind, rec.key.to_vec(), rec.value.to_vec())),
        (Some(h), true) => {
            let plain = h.0.unseal(rec.value)?;
            let kl = *plain.first()? as usize;
            if kl == 0 || plain.len() < 1 + kl {
                return None;
            }
            Some((
                rec.kind & !SEALED,
                plain[1..1 + kl].to_vec(),
                plain[1 + kl..].to_vec(),
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_damage() {
        let mut buf = vec![0u8; 256];
        encode_record(&mut buf, KIND_SET, 7, 99, 5, 4096, b"key", b"va\r\nlue");
        let rec = decode_record(&buf).expect("intact");
        assert_eq!(
            (rec.key, rec.value, rec.flags, rec.cas),
            (&b"key"[..], &b"va\r\nlue"[..], 7, 5)
        );
        for i in 0..record_len(3, 7) {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode_record(&bad).is_none(), "flip at {i} accepted");
        }
        assert!(decode_record(&[0u8; 64]).is_none());
    }

    #[test]
    fn chunk_header_round_trip() {
        let mut buf = vec![0u8; CHUNK_HEADER];
        write_chunk_header(&mut buf, 42, 1 << 20);
        assert_eq!(read_chunk_header(&buf, 1 << 20), Some(42));
        assert_eq!(read_chunk_header(&buf, 2 << 20), None);
        buf[17] ^= 1;
        assert_eq!(read_chunk_header(&buf, 1 << 20), None);
    }
}
