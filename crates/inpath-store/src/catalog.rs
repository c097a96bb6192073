//! The catalog: the store's list of handles, each with its extent map.
//!
//! One file, `DIR/catalog`, rewritten whole on every change through
//! `inpath_core::output::write_file` (written aside, fsynced, renamed), so a crash leaves the
//! old catalog or the new one, never a mix. Layout (all integers little-endian; also in
//! docs/FORMATS.md, "store catalog"):
//!
//! ```text
//! offset  size  field
//!  0      8     magic "INPSTORE"
//!  8      2     format version, u16: 1
//! 10      2     reserved, zero
//! 12      4     entry count N, u32
//! 16      8     next handle id, u64 (ids are never reused)
//! 24      …     N entries, in increasing handle id
//! end−4   4     CRC-32 (IEEE 802.3, as zlib's crc32) of every byte before it
//!
//! entry:
//!  0      8     handle id, u64
//!  8      8     generation, u64 (1 at the first put of a name, +1 at each replacement)
//! 16      8     file size in bytes, u64
//! 24      4     page size in bytes, u32 (512 .. 16 MiB)
//! 28      1     tier: 0 = raw pages, 1 = sealed pages (one seal record per page)
//! 29      1     codec text length C (0 for raw)
//! 30      2     name length L (1 .. 4096)
//! 32      8     page count P, u64 = ceil(size / page size)
//! 40      L     name, UTF-8
//! 40+L    C     codec text, ASCII (for example "deflate-1+aes256-gcm")
//!  …      12·P  extent map, logical page order: physical byte offset in the data file (u64),
//!               stored length (u32)
//! ```
//!
//! The extent map is what lets pages move (compaction) without the handle changing: readers
//! go from a logical page to its physical place only through it.

use crate::error::{Result, StoreError};
use inpath_core::source::Mapping;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The catalog's magic number.
pub const MAGIC: [u8; 8] = *b"INPSTORE";
/// The newest catalog format version this build writes and reads.
pub const VERSION: u16 = 1;
/// The smallest page size accepted.
pub const MIN_PAGE: u32 = 512;
/// The largest page size accepted.
pub const MAX_PAGE: u32 = 16 << 20;
/// The longest name accepted, in bytes.
pub const MAX_NAME: usize = 4096;

const HEADER: usize = 24;
/// Catalogs from this size on are parsed from a read-only mapping instead of a copy.
const MAP_CATALOG_FROM: u64 = 256 << 10;
const ENTRY_FIXED: usize = 40;
const EXTENT: usize = 12;

/// How a handle's pages are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Pages as they are, back to back.
    Raw,
    /// Each page sealed with `inpath-seal` (compressed and/or encrypted), one record per page.
    Sealed,
}

/// Where one logical page lives in the handle's data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Byte offset in the data file.
    pub offset: u64,
    /// Stored length in bytes (the page itself when raw, the seal record when sealed).
    pub len: u32,
}

/// One handle: a named file in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The handle id (stable across replacements of the same name).
    pub handle: u64,
    /// The generation: 1 at the first put, one more at each replacement.
    pub generation: u64,
    /// The name given at put.
    pub name: String,
    /// Size of the file in bytes.
    pub size: u64,
    /// Page size in bytes.
    pub page_size: u32,
    /// Raw or sealed.
    pub tier: Tier,
    /// The codec in words: `raw`, or the seal compression and cipher (`deflate-1+aes256-gcm`).
    pub codec: String,
    /// Logical page → physical place in the data file. Shared: an entry is cloned for every
    /// handle opened, and the map of a 1 GB handle of 8 KiB pages is 2 MB.
    pub extents: Arc<Vec<Extent>>,
}

impl Entry {
    /// Number of pages.
    pub fn pages(&self) -> u64 {
        self.extents.len() as u64
    }

    /// Length of logical page `page` (the last page may be short).
    pub fn page_len(&self, page: u64) -> u64 {
        let start = page * self.page_size as u64;
        (self.size - start).min(self.page_size as u64)
    }

    /// Bytes the data file holds for this handle.
    pub fn stored_bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.len as u64).sum()
    }

    /// The data file's name inside `DIR/pages/`.
    pub fn data_file_name(&self) -> String {
        format!("{}-{}.pages", self.handle, self.generation)
    }
}

/// A reference to a handle: an id, and optionally the generation the caller expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleRef {
    /// The handle id.
    pub id: u64,
    /// The generation expected, or `None` for whatever is current.
    pub generation: Option<u64>,
}

impl HandleRef {
    /// Parses `ID` or `ID@GENERATION`.
    pub fn parse(text: &str) -> Result<HandleRef> {
        let bad = || StoreError::BadHandle {
            text: text.to_string(),
        };
        let num = |s: &str| -> Result<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        match text.split_once('@') {
            Some((id, generation)) => Ok(HandleRef {
                id: num(id)?,
                generation: Some(num(generation)?),
            }),
            None => Ok(HandleRef {
                id: num(text)?,
                generation: None,
            }),
        }
    }
}

impl From<u64> for HandleRef {
    fn from(id: u64) -> HandleRef {
        HandleRef {
            id,
            generation: None,
        }
    }
}

impl std::fmt::Display for HandleRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.generation {
            Some(g) => write!(f, "{}@{g}", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// The catalog in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Catalog {
    /// The next handle id to give out.
    pub next_handle: u64,
    /// The handles, in increasing id.
    pub entries: Vec<Entry>,
}

impl Catalog {
    /// An empty catalog; the first handle is 1.
    pub fn new() -> Catalog {
        Catalog {
            next_handle: 1,
            entries: Vec::new(),
        }
    }

    /// The catalog file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 64 * self.entries.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.next_handle.to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.handle.to_le_bytes());
            out.extend_from_slice(&e.generation.to_le_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&e.page_size.to_le_bytes());
            out.push(match e.tier {
                Tier::Raw => 0,
                Tier::Sealed => 1,
            });
            // Raw handles store no codec text (it reads back as "raw").
            let codec = match e.tier {
                Tier::Raw => &b""[..],
                Tier::Sealed => e.codec.as_bytes(),
            };
            out.push(codec.len() as u8);
            out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            out.extend_from_slice(&(e.extents.len() as u64).to_le_bytes());
            out.extend_from_slice(e.name.as_bytes());
            out.extend_from_slice(codec);
            for x in e.extents.iter() {
                out.extend_from_slice(&x.offset.to_le_bytes());
                out.extend_from_slice(&x.len.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses catalog bytes read from `path` (named in errors). Checks the magic, version, CRC,
    /// reserved bytes, every field's range and that the lengths add up, before allocating
    /// anything a damaged count could make large.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Catalog> {
        let damaged = |detail: String| StoreError::CatalogDamaged {
            path: path.to_path_buf(),
            detail,
        };
        if bytes.len() < HEADER + 4 {
            return Err(damaged(format!(
                "{} bytes, shorter than the {}-byte header and checksum",
                bytes.len(),
                HEADER + 4
            )));
        }
        if bytes[0..8] != MAGIC {
            return Err(damaged(format!(
                "magic is {:02x?}, expected \"INPSTORE\": not a store catalog",
                &bytes[0..8]
            )));
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version == 0 || version > VERSION {
            return Err(StoreError::CatalogVersion {
                path: path.to_path_buf(),
                version,
                newest: VERSION,
            });
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(damaged(format!(
                "CRC-32 is {stored:08x}, computed {computed:08x}"
            )));
        }
        if bytes[10..12] != [0, 0] {
            return Err(damaged("reserved bytes 10..12 are not zero".into()));
        }
        let count = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
        let next_handle = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        let mut at = HEADER;
        let mut entries = Vec::new();
        let mut last_id = 0u64;
        for i in 0..count {
            let rest = &body[at..];
            if rest.len() < ENTRY_FIXED {
                return Err(damaged(format!("entry {i} is truncated")));
            }
            let u64_at = |o: usize| u64::from_le_bytes(rest[o..o + 8].try_into().expect("8"));
            let handle = u64_at(0);
            let generation = u64_at(8);
            let size = u64_at(16);
            let page_size = u32::from_le_bytes(rest[24..28].try_into().expect("4"));
            let tier = match rest[28] {
                0 => Tier::Raw,
                1 => Tier::Sealed,
                t => return Err(damaged(format!("entry {i}: unknown tier code {t}"))),
            };
            let codec_len = rest[29] as usize;
            let name_len = u16::from_le_bytes([rest[30], rest[31]]) as usize;
            let pages = u64_at(32);
            if handle == 0 || handle <= last_id || handle >= next_handle {
                return Err(damaged(format!(
                    "entry {i}: handle id {handle} out of order or not below the next id {next_handle}"
                )));
            }
            last_id = handle;
            if generation == 0 {
                return Err(damaged(format!("entry {i}: generation 0")));
            }
            if !(MIN_PAGE..=MAX_PAGE).contains(&page_size) {
                return Err(damaged(format!(
                    "entry {i}: page size {page_size} outside {MIN_PAGE}..={MAX_PAGE}"
                )));
            }
            if pages != size.div_ceil(page_size as u64) {
                return Err(damaged(format!(
                    "entry {i}: {pages} pages for {size} bytes in pages of {page_size}"
                )));
            }
            if name_len == 0 || name_len > MAX_NAME {
                return Err(damaged(format!("entry {i}: name length {name_len}")));
            }
            if (tier == Tier::Raw) != (codec_len == 0) {
                return Err(damaged(format!(
                    "entry {i}: codec text of {codec_len} bytes for tier {tier:?}"
                )));
            }
            let var = (name_len + codec_len) as u64;
            let need = (ENTRY_FIXED as u64)
                .checked_add(var)
                .and_then(|n| pages.checked_mul(EXTENT as u64)?.checked_add(n))
                .filter(|&n| n <= rest.len() as u64)
                .ok_or_else(|| damaged(format!("entry {i} is truncated")))?
                as usize;
            let name = std::str::from_utf8(&rest[ENTRY_FIXED..ENTRY_FIXED + name_len])
                .map_err(|_| damaged(format!("entry {i}: name is not UTF-8")))?
                .to_string();
            let codec_bytes = &rest[ENTRY_FIXED + name_len..ENTRY_FIXED + name_len + codec_len];
            if !codec_bytes.is_ascii() {
                return Err(damaged(format!("entry {i}: codec text is not ASCII")));
            }
            let codec = if tier == Tier::Raw {
                "raw".to_string()
            } else {
                String::from_utf8_lossy(codec_bytes).into_owned()
            };
            let mut extents = Vec::with_capacity(pages as usize);
            let ext_bytes = &rest[ENTRY_FIXED + name_len + codec_len..need];
            for (p, x) in ext_bytes.chunks_exact(EXTENT).enumerate() {
                let extent = Extent {
                    offset: u64::from_le_bytes(x[0..8].try_into().expect("8")),
                    len: u32::from_le_bytes(x[8..12].try_into().expect("4")),
                };
                let page_len = (size - p as u64 * page_size as u64).min(page_size as u64);
                if tier == Tier::Raw && extent.len as u64 != page_len {
                    return Err(damaged(format!(
                        "entry {i}: raw page {p} stored as {} bytes, expected {page_len}",
                        extent.len
                    )));
                }
                extent
                    .offset
                    .checked_add(extent.len as u64)
                    .ok_or_else(|| damaged(format!("entry {i}: extent {p} overflows")))?;
                extents.push(extent);
            }
            entries.push(Entry {
                handle,
                generation,
                name,
                size,
                page_size,
                tier,
                codec,
                extents: Arc::new(extents),
            });
            at += need;
        }
        if at != body.len() {
            return Err(damaged(format!(
                "{} bytes after the last entry",
                body.len() - at
            )));
        }
        Ok(Catalog {
            next_handle,
            entries,
        })
    }

    /// Reads the catalog of the store in `dir`.
    pub fn load(dir: &Path) -> Result<Catalog> {
        use std::io::Read;
        let path = catalog_path(dir);
        let read_err = |source| StoreError::Read {
            path: path.clone(),
            source,
        };
        let mut file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotAStore {
                    dir: dir.to_path_buf(),
                })
            }
            Err(source) => return Err(read_err(source)),
        };
        let len = file.metadata().map_err(read_err)?.len();
        // A large catalog (1.5 MB for a 1 GB handle of 8 KiB pages) is parsed from the page
        // cache in place: reading it would copy it into as many fresh pages, ~0.5 ms of a
        // command that greps the handle in 45 ms. The catalog is replaced by renaming, never
        // rewritten in place; a truncation under us is caught by the mapping's guard.
        if len >= MAP_CATALOG_FROM {
            if let Some(map) = file
                .try_clone()
                .ok()
                .and_then(|f| Mapping::map_for_reads(f, &path))
            {
                let catalog = Catalog::from_bytes(map.bytes(), &path)?;
                map.check_unchanged()
                    .map_err(|e| StoreError::CatalogDamaged {
                        path: path.clone(),
                        detail: e.to_string(),
                    })?;
                return Ok(catalog);
            }
        }
        let mut bytes = Vec::with_capacity(len.min(MAP_CATALOG_FROM) as usize);
        file.read_to_end(&mut bytes).map_err(read_err)?;
        Catalog::from_bytes(&bytes, &path)
    }

    /// Writes the catalog of the store in `dir`, all or nothing.
    pub fn save(&self, dir: &Path) -> Result<()> {
        inpath_core::output::write_file(&catalog_path(dir), &self.to_bytes(), &[])?;
        Ok(())
    }
}

/// The catalog file of the store in `dir`.
pub fn catalog_path(dir: &Path) -> PathBuf {
    dir.join("catalog")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Catalog {
        Catalog {
            next_handle: 3,
            entries: vec![
                Entry {
                    handle: 1,
                    generation: 2,
                    name: "a.txt".into(),
                    size: 10_000,
                    page_size: 8192,
                    tier: Tier::Raw,
                    codec: "raw".into(),
                    extents: Arc::new(vec![
                        Extent {
                            offset: 0,
                            len: 8192,
                        },
                        Extent {
                            offset: 8192,
                            len: 1808,
                        },
                    ]),
                },
                Entry {
                    handle: 2,
                    generation: 1,
                    name: "b".into(),
                    size: 0,
                    page_size: 4096,
                    tier: Tier::Sealed,
                    codec: "none+aes256-gcm".into(),
                    extents: Default::default(),
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        let bytes = c.to_bytes();
        assert_eq!(Catalog::from_bytes(&bytes, Path::new("c")).unwrap(), c);
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let bytes = sample().to_bytes();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(
                Catalog::from_bytes(&b, Path::new("c")).is_err(),
                "flip at {i} accepted"
            );
        }
        for n in 0..bytes.len() {
            assert!(Catalog::from_bytes(&bytes[..n], Path::new("c")).is_err());
        }
    }

    #[test]
    fn newer_version_is_named() {
        let mut b = sample().to_bytes();
        b[8] = 9;
        let n = b.len();
        let crc = crc32fast::hash(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        match Catalog::from_bytes(&b, Path::new("c")) {
            Err(StoreError::CatalogVersion { version: 9, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn handle_refs() {
        assert_eq!(
            HandleRef::parse("12@3").unwrap(),
            HandleRef {
                id: 12,
                generation: Some(3)
            }
        );
        assert_eq!(HandleRef::parse("7").unwrap(), HandleRef::from(7));
        for bad in ["", "x", "1@", "@1", "-1", "1@2@3", "99999999999999999999"] {
            assert!(matches!(
                HandleRef::parse(bad),
                Err(StoreError::BadHandle { .. })
            ));
        }
    }
}
