//! Approximate Hamming search: locality-sensitive hashing by bit sampling.
//!
//! An index has `L` tables ([`LshParams::tables`]). Table `t` hashes an item by `b` of its
//! bits ([`LshParams::bits`]) at positions drawn once from a seeded generator: the key is
//! `Σ bit(item, pos[t][i]) << i`, bit `j` of an item being bit `j % 8` of byte `j / 8`. Two
//! items at Hamming distance `d` out of `D = 8 · item_size` bits get the same key in a table
//! with probability `(1 − d/D)^b`, so near neighbours collide in some table and far ones
//! rarely do. A search looks up the query's bucket in each table (and, with a probe radius
//! `r`, the buckets whose keys differ from it in up to `r` bits: multi-probe), reads the
//! candidate items from the store, computes their exact distances with the flat scan's kernel,
//! and returns the `k` nearest by `(distance, index)`. Distances are exact; only items that
//! share no probed bucket with the query are missed, so an answer can have fewer than `k`.
//!
//! The index is built by one scan over the handle ([`LshIndex::build`]: the kernel contract,
//! any lane count) and stored beside the store's data as `DIR/index/ID.lsh`
//! ([`LshIndex::path`]), written aside and renamed into place. The file (docs/FORMATS.md,
//! "LSH index") carries a magic number, a version, CRCs, and the handle's id, generation and
//! size and the item size it was built for; [`LshIndex::load`] checks all of them, so a
//! damaged file or one left over from an earlier generation of the handle is an error that
//! names the fix, never a wrong answer.

use crate::arch::{self, HammingKernel};
use crate::error::{Result, StoreError};
use crate::hamming::{offer, Neighbour, Neighbours, MAX_ITEM_SIZE};
use crate::kernel::{self, Flow, Kernel, Partial, Scan};
use crate::reader::FlashReader;
use crate::store::OpenHandle;
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"INPLSHIX";
/// The format version this build writes (and the newest it reads).
pub const VERSION: u16 = 1;
/// The header's size in bytes.
pub const HEADER: usize = 80;
/// Tables by default.
pub const DEFAULT_TABLES: u32 = 8;
/// Sampled bits per table by default.
pub const DEFAULT_BITS: u32 = 16;
/// The seed of the bit positions by default (any seed gives a valid index; this one is fixed
/// so indexes built anywhere are the same).
pub const DEFAULT_SEED: u64 = 0x1C5B_17E5_A3D0_0042;
/// The most tables.
pub const MAX_TABLES: u32 = 64;
/// The most bits per table (a key is a `u32`).
pub const MAX_BITS: u32 = 32;
/// The largest multi-probe radius (radius 2 probes `1 + b + b(b−1)/2` buckets per table).
pub const MAX_PROBE: u32 = 2;

/// How an index samples bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LshParams {
    /// Tables (`L`), 1 to [`MAX_TABLES`].
    pub tables: u32,
    /// Bits per table (`b`), 1 to [`MAX_BITS`] and at most the item's bits.
    pub bits: u32,
    /// Seed of the bit positions.
    pub seed: u64,
}

impl Default for LshParams {
    fn default() -> LshParams {
        LshParams {
            tables: DEFAULT_TABLES,
            bits: DEFAULT_BITS,
            seed: DEFAULT_SEED,
        }
    }
}

impl LshParams {
    /// Checks the parameters for items of `item_size` bytes.
    pub fn check(&self, item_size: usize) -> Result<()> {
        if item_size == 0 || item_size > MAX_ITEM_SIZE {
            return Err(StoreError::parameter(
                "item size",
                item_size,
                "1 byte to 256 MiB",
            ));
        }
        if !(1..=MAX_TABLES).contains(&self.tables) {
            return Err(StoreError::parameter(
                "LSH tables",
                self.tables,
                &format!("1 to {MAX_TABLES}"),
            ));
        }
        let most = (MAX_BITS as usize).min(item_size * 8);
        if !(1..=most).contains(&(self.bits as usize)) {
            return Err(StoreError::parameter(
                "LSH bits",
                self.bits,
                &format!(
                    "1 to {most} (at most {MAX_BITS}, and at most the {} bits of a {item_size}-byte item)",
                    item_size * 8
                ),
            ));
        }
        Ok(())
    }

    /// The sampled bit positions, table after table (`bits` each, ascending within a table):
    /// distinct positions in `0..8 · item_size` drawn with SplitMix64 from `seed + table`.
    pub fn positions(&self, item_size: usize) -> Vec<u32> {
        let total = (item_size * 8) as u64;
        let mut out = Vec::with_capacity((self.tables * self.bits) as usize);
        for t in 0..self.tables {
            let mut state = self.seed.wrapping_add(t as u64);
            let mut table: Vec<u32> = Vec::with_capacity(self.bits as usize);
            while table.len() < self.bits as usize {
                let p = (splitmix64(&mut state) % total) as u32;
                if !table.contains(&p) {
                    table.push(p);
                }
            }
            table.sort_unstable();
            out.extend(table);
        }
        out
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of `item` for one table's bit positions.
#[inline]
fn key(item: &[u8], positions: &[u32]) -> u32 {
    positions.iter().enumerate().fold(0u32, |k, (i, &p)| {
        k | (((item[(p / 8) as usize] >> (p % 8)) & 1) as u32) << i
    })
}

/// An LSH index over one generation of a handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LshIndex {
    /// The handle id.
    pub handle: u64,
    /// The handle's generation when the index was built.
    pub generation: u64,
    /// The handle's size in bytes then.
    pub size: u64,
    /// Item size in bytes.
    pub item_size: usize,
    /// The parameters.
    pub params: LshParams,
    positions: Vec<u32>,
    /// The whole file (docs/FORMATS.md): searches read the tables in place, per table the
    /// keys ascending, then the item indices in the same order (ascending within a key).
    file: Vec<u8>,
}

/// What an LSH search did, besides its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LshStats {
    /// Buckets looked up (tables × probes per table × queries).
    pub buckets_probed: u64,
    /// Distinct candidate items verified by exact distance, over all queries.
    pub candidates: u64,
    /// Bytes of items read from the store to verify them.
    pub bytes_read: u64,
}

/// The build kernel: each lane hashes the items it owns.
struct Build {
    item_size: usize,
    tables: usize,
    positions: Vec<u32>,
}

/// A lane's keys: per table, one key per item in item order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Keys {
    keys: Vec<Vec<u32>>,
}

impl Partial for Keys {
    fn merge(mut self, later: Keys) -> Keys {
        if self.keys.is_empty() {
            return later;
        }
        for (mine, theirs) in self.keys.iter_mut().zip(later.keys) {
            mine.extend(theirs);
        }
        self
    }
}

struct BuildScan {
    item_size: usize,
    positions: Vec<u32>,
    carry: Vec<u8>,
    keys: Vec<Vec<u32>>,
}

impl Kernel for Build {
    type Partial = Keys;
    type Scan = BuildScan;

    fn reach(&self, own: Range<u64>, size: u64) -> Range<u64> {
        let is = self.item_size as u64;
        let first = own.start.div_ceil(is) * is;
        let last = (own.end.div_ceil(is) * is).min(size / is * is);
        first.min(last)..last
    }

    fn scan(&self, _own: Range<u64>, _size: u64) -> BuildScan {
        BuildScan {
            item_size: self.item_size,
            positions: self.positions.clone(),
            carry: Vec::new(),
            keys: vec![Vec::new(); self.tables],
        }
    }
}

impl BuildScan {
    fn items(&mut self, items: &[u8]) {
        let b = self.positions.len() / self.keys.len();
        for item in items.chunks_exact(self.item_size) {
            for (t, keys) in self.keys.iter_mut().enumerate() {
                keys.push(key(item, &self.positions[t * b..(t + 1) * b]));
            }
        }
    }
}

impl Scan for BuildScan {
    type Partial = Keys;

    fn feed(&mut self, _offset: u64, bytes: &[u8]) -> Flow {
        let mut carry = std::mem::take(&mut self.carry);
        crate::kernel::whole_items(&mut carry, self.item_size, bytes, |items| self.items(items));
        self.carry = carry;
        Flow::More
    }

    fn finish(self) -> Keys {
        Keys { keys: self.keys }
    }
}

/// The buckets a probe of radius `radius` looks in: `key`, then keys with one bit of the low
/// `bits` flipped, then two.
fn probes(key: u32, bits: u32, radius: u32, out: &mut Vec<u32>) {
    out.clear();
    out.push(key);
    if radius >= 1 {
        for i in 0..bits {
            out.push(key ^ (1 << i));
        }
    }
    if radius >= 2 {
        for i in 0..bits {
            for j in i + 1..bits {
                out.push(key ^ (1 << i) ^ (1 << j));
            }
        }
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl LshIndex {
    /// Where the index of handle `id` lives in the store at `dir`: `DIR/index/ID.lsh`.
    pub fn path(dir: &Path, id: u64) -> PathBuf {
        dir.join("index").join(format!("{id}.lsh"))
    }

    /// Builds an index over `handle`'s items of `item_size` bytes by one scan with `lanes`
    /// lanes.
    pub fn build(
        reader: &FlashReader,
        handle: &Arc<OpenHandle>,
        item_size: usize,
        params: LshParams,
        lanes: usize,
    ) -> Result<(LshIndex, kernel::RunStats)> {
        params.check(item_size)?;
        let entry = handle.entry();
        if !entry.size.is_multiple_of(item_size as u64) {
            return Err(StoreError::parameter(
                "item size",
                item_size,
                &format!("a divisor of the handle's size ({} bytes)", entry.size),
            ));
        }
        let positions = params.positions(item_size);
        let build = Build {
            item_size,
            tables: params.tables as usize,
            positions: positions.clone(),
        };
        let (keys, stats) = kernel::run_counted(reader, handle, &build, lanes)?;
        let n = (entry.size / item_size as u64) as usize;
        let mut index = LshIndex {
            handle: entry.handle,
            generation: entry.generation,
            size: entry.size,
            item_size,
            params,
            positions,
            file: Vec::new(),
        };
        let mut file = index.header();
        file.reserve(4 * index.positions.len() + params.tables as usize * n * 12 + 4);
        for &p in &index.positions {
            put_u32(&mut file, p);
        }
        for t in 0..params.tables as usize {
            let table = keys.keys.get(t).map(Vec::as_slice).unwrap_or_default();
            debug_assert_eq!(table.len(), n);
            let mut pairs: Vec<(u32, u64)> = table
                .iter()
                .enumerate()
                .map(|(i, &k)| (k, i as u64))
                .collect();
            pairs.sort_unstable();
            for p in &pairs {
                put_u32(&mut file, p.0);
            }
            for p in &pairs {
                put_u64(&mut file, p.1);
            }
        }
        let crc = crc32fast::hash(&file[HEADER..]);
        put_u32(&mut file, crc);
        index.file = file;
        Ok((index, stats))
    }

    /// Items indexed.
    pub fn items(&self) -> u64 {
        self.size / self.item_size as u64
    }

    /// The header's bytes.
    fn header(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER);
        out.extend_from_slice(MAGIC);
        put_u16(&mut out, VERSION);
        put_u16(&mut out, 0);
        put_u32(&mut out, self.params.tables);
        put_u32(&mut out, self.params.bits);
        put_u32(&mut out, 0);
        put_u64(&mut out, self.params.seed);
        put_u64(&mut out, self.handle);
        put_u64(&mut out, self.generation);
        put_u64(&mut out, self.size);
        put_u64(&mut out, self.item_size as u64);
        put_u64(&mut out, self.items());
        let crc = crc32fast::hash(&out);
        put_u32(&mut out, crc);
        put_u32(&mut out, 0);
        debug_assert_eq!(out.len(), HEADER);
        out
    }

    /// The file's bytes (docs/FORMATS.md, "LSH index").
    pub fn as_bytes(&self) -> &[u8] {
        &self.file
    }

    /// Byte offset of table `t`'s keys in the file.
    fn table_at(&self, t: usize) -> usize {
        HEADER + 4 * self.positions.len() + t * 12 * self.items() as usize
    }

    /// The item indices in table `t` whose key is `key`.
    fn bucket(&self, t: usize, key: u32) -> impl Iterator<Item = u64> + '_ {
        let n = self.items() as usize;
        let at = self.table_at(t);
        let key_at = |i: usize| u32_at(&self.file, at + 4 * i);
        // The first position whose key is not below `key`, then the first above it.
        let first = |pred: &dyn Fn(u32) -> bool| {
            let (mut lo, mut hi) = (0usize, n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if pred(key_at(mid)) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let lo = first(&|k| k < key);
        let hi = lo + {
            let (mut a, mut b) = (lo, n);
            while a < b {
                let mid = a + (b - a) / 2;
                if key_at(mid) == key {
                    a = mid + 1;
                } else {
                    b = mid;
                }
            }
            a - lo
        };
        let ids = at + 4 * n;
        (lo..hi).map(move |i| u64_at(&self.file, ids + 8 * i))
    }

    /// Writes the index to `path`, aside and renamed into place.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Write {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        inpath_core::output::write_file(path, &self.file, &[])?;
        Ok(())
    }

    /// Parses and checks an index file's bytes (`path` names it in errors).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<LshIndex> {
        LshIndex::parse(bytes.to_vec(), path)
    }

    fn parse(file: Vec<u8>, path: &Path) -> Result<LshIndex> {
        let bytes = &file[..];
        let bad = |detail: String| StoreError::LshIndex {
            path: path.to_path_buf(),
            detail,
        };
        let rebuild = "delete it and build it again (inpath store index)";
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(bad(format!(
                "not an LSH index (no {:?} magic at the start); {rebuild}",
                std::str::from_utf8(MAGIC).unwrap_or_default()
            )));
        }
        if bytes.len() < HEADER + 4 {
            return Err(bad(format!(
                "truncated: {} bytes, shorter than its header; {rebuild}",
                bytes.len()
            )));
        }
        let version = u16_at(bytes, 8);
        if version != VERSION {
            return Err(bad(format!(
                "format version {version}; this build reads version {VERSION}; {rebuild}"
            )));
        }
        if crc32fast::hash(&bytes[..72]) != u32_at(bytes, 72) {
            return Err(bad(format!(
                "corrupt: the header fails its CRC-32; {rebuild}"
            )));
        }
        if u16_at(bytes, 10) != 0 || u32_at(bytes, 20) != 0 || u32_at(bytes, 76) != 0 {
            return Err(bad(format!(
                "corrupt: non-zero flags or reserved bytes in the header; {rebuild}"
            )));
        }
        let params = LshParams {
            tables: u32_at(bytes, 12),
            bits: u32_at(bytes, 16),
            seed: u64_at(bytes, 24),
        };
        let handle = u64_at(bytes, 32);
        let generation = u64_at(bytes, 40);
        let size = u64_at(bytes, 48);
        let item_size = u64_at(bytes, 56);
        let n = u64_at(bytes, 64);
        let corrupt = |what: &str| bad(format!("corrupt: {what}; {rebuild}"));
        if item_size == 0 || item_size > MAX_ITEM_SIZE as u64 {
            return Err(corrupt("an item size out of range"));
        }
        let item_size = item_size as usize;
        params
            .check(item_size)
            .map_err(|e| corrupt(&e.to_string()))?;
        if size / item_size as u64 != n || !size.is_multiple_of(item_size as u64) {
            return Err(corrupt("the item count does not fit the handle size"));
        }
        let l = params.tables as u64;
        let b = params.bits as u64;
        let want = (l * b * 4)
            .checked_add(
                n.checked_mul(12 * l)
                    .ok_or_else(|| corrupt("too many items"))?,
            )
            .and_then(|body| body.checked_add(HEADER as u64 + 4));
        if want != Some(bytes.len() as u64) {
            return Err(corrupt(&format!(
                "{} bytes where its header announces {}",
                bytes.len(),
                want.map_or("more than 2^64".into(), |w| w.to_string())
            )));
        }
        let end = bytes.len() - 4;
        if crc32fast::hash(&bytes[HEADER..end]) != u32_at(bytes, end) {
            return Err(corrupt("the tables fail their CRC-32"));
        }
        let mut positions = Vec::with_capacity((l * b) as usize);
        for i in 0..(l * b) as usize {
            let p = u32_at(bytes, HEADER + 4 * i);
            if p as u64 >= item_size as u64 * 8 {
                return Err(corrupt(&format!("bit position {p} is past the item")));
            }
            positions.push(p);
        }
        // The tables are read in place by searches (binary search on the keys); an item index
        // past the end is refused when it is met.
        Ok(LshIndex {
            handle,
            generation,
            size,
            item_size,
            params,
            positions,
            file,
        })
    }

    /// Loads the index of `handle` from the store at `dir` and checks that it was built for
    /// the handle's current generation and size and for items of `item_size` bytes (`None`:
    /// whatever it was built for).
    pub fn load(dir: &Path, handle: &OpenHandle, item_size: Option<usize>) -> Result<LshIndex> {
        let entry = handle.entry();
        let path = LshIndex::path(dir, entry.handle);
        let fix = |is: String| {
            format!(
                "build it: inpath store index {} {} --item-size {is}",
                dir.display(),
                entry.handle
            )
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::LshIndex {
                    path,
                    detail: format!(
                        "handle {} has no LSH index; {}",
                        entry.handle,
                        fix(item_size.map_or("SIZE".into(), |is| is.to_string()))
                    ),
                })
            }
            Err(source) => return Err(StoreError::Read { path, source }),
        };
        let index = LshIndex::parse(bytes, &path).map_err(|e| match e {
            StoreError::LshIndex { path, detail } => StoreError::LshIndex {
                detail: detail.replace(
                    "(inpath store index)",
                    &format!(
                        "({})",
                        fix(item_size.map_or("SIZE".into(), |is| is.to_string()))
                            .trim_start_matches("build it: ")
                    ),
                ),
                path,
            },
            e => e,
        })?;
        if index.handle != entry.handle
            || index.generation != entry.generation
            || index.size != entry.size
        {
            return Err(StoreError::LshIndex {
                detail: format!(
                    "stale: built for handle {}@{} ({} bytes), the store holds {}@{} ({} bytes); \
                     re{}",
                    index.handle,
                    index.generation,
                    index.size,
                    entry.handle,
                    entry.generation,
                    entry.size,
                    fix(item_size.unwrap_or(index.item_size).to_string())
                ),
                path,
            });
        }
        if let Some(is) = item_size {
            if is != index.item_size {
                return Err(StoreError::LshIndex {
                    detail: format!(
                        "built for {}-byte items, not {is}; ask with --item-size {} or re{}",
                        index.item_size,
                        index.item_size,
                        fix(is.to_string())
                    ),
                    path,
                });
            }
        }
        Ok(index)
    }

    /// The `k` nearest items to each query among the candidates that share a probed bucket
    /// with it, with exact distances, by `(distance, index)`; fewer than `k` when fewer
    /// candidates are found. `probe` is the multi-probe radius (0 to [`MAX_PROBE`]).
    pub fn search(
        &self,
        handle: &OpenHandle,
        queries: &[u8],
        k: usize,
        probe: u32,
        kernel: HammingKernel,
    ) -> Result<(Neighbours, LshStats)> {
        let is = self.item_size;
        if queries.is_empty() || !queries.len().is_multiple_of(is) {
            return Err(StoreError::parameter(
                "queries",
                format!("{} bytes", queries.len()),
                &format!("a non-zero multiple of the item size ({is} bytes)"),
            ));
        }
        if k == 0 {
            return Err(StoreError::parameter("k", 0, "at least 1"));
        }
        if probe > MAX_PROBE {
            return Err(StoreError::parameter(
                "LSH probe radius",
                probe,
                &format!("0 to {MAX_PROBE}"),
            ));
        }
        let entry = handle.entry();
        if entry.handle != self.handle || entry.generation != self.generation {
            return Err(StoreError::parameter(
                "LSH index",
                format!("handle {}@{}", self.handle, self.generation),
                &format!("the index of {}@{}", entry.handle, entry.generation),
            ));
        }
        let kernel = if kernel.runs_here() {
            kernel
        } else {
            HammingKernel::Portable
        };
        let b = self.params.bits as usize;
        let mut stats = LshStats::default();
        let mut out = Vec::with_capacity(queries.len() / is);
        let mut keys = Vec::new();
        let mut cands: Vec<u64> = Vec::new();
        let n = self.items();
        let mut d = [0u32; 1];
        for q in queries.chunks_exact(is) {
            cands.clear();
            for t in 0..self.params.tables as usize {
                probes(
                    key(q, &self.positions[t * b..(t + 1) * b]),
                    self.params.bits,
                    probe,
                    &mut keys,
                );
                for &key in &keys {
                    stats.buckets_probed += 1;
                    cands.extend(self.bucket(t, key));
                }
            }
            if cands.iter().any(|&i| i >= n) {
                return Err(StoreError::LshIndex {
                    path: PathBuf::from(format!("of handle {}", self.handle)),
                    detail: format!(
                        "corrupt: a table names an item past the last ({n} items); delete it \
                         and build it again (inpath store index)"
                    ),
                });
            }
            cands.sort_unstable();
            cands.dedup();
            stats.candidates += cands.len() as u64;
            let mut heap = BinaryHeap::with_capacity(k + 1);
            for &i in &cands {
                let item = handle.read(i * is as u64, is as u64)?;
                stats.bytes_read += is as u64;
                arch::distances(kernel, &item, is, q, 1, &mut d);
                offer(
                    &mut heap,
                    k,
                    Neighbour {
                        distance: d[0],
                        index: i,
                    },
                );
            }
            out.push(heap.into_sorted_vec());
        }
        Ok((Neighbours { k, queries: out }, stats))
    }
}
