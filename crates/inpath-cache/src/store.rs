//! The key-value store: DRAM index, hot values in DRAM (sampled-LRU victims), and the flash log
//! (write-through, 1 MiB-class chunks, oldest chunk reclaimed), checkpoint and recovery.
//!
//! Every mutation appends a checksummed record to the log (write-through), so a value's DRAM copy
//! always has a flash copy (its `backing` address) unless that copy's chunk was reclaimed; then
//! the DRAM victim is written again ("rescued"). Reclaiming a chunk is lazy: the log tail moves
//! past it and any index entry pointing below the tail is dead (a miss that touches no flash).

use crate::error::{CacheError, Result};
use crate::flash::{self, open_record, AlignedBuf, FlashFile, ALIGN, CHUNK_HEADER};
use crate::index::{Entry, Index, KeyHash, Loc, Pos, BUCKET_BYTES, VLEN_MAX};
use crate::recover;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

// The store's vocabulary lives in the `types` leaf; these paths (`inpath_cache::store::...`)
// stay as they were before it moved.
pub use crate::types::{
    abs_exptime, now_unix, ArithRes, DelRes, Geometry, ItemDebug, ItemOut, MetaDelete, MetaGet,
    MetaItem, Mode, RecordSeal, RecoveryReport, Resident, SealError, SealHook, Settings,
    StoreConfig, StoreReq, StoreRes, KEY_MAX,
};

/// DRAM cost of one value beyond its key and value bytes: its item struct and the allocator's
/// header and rounding of the key-and-value block (measured against the process's anonymous
/// memory by `tests/cache/memory.rs`).
const DRAM_ITEM_OVERHEAD: usize = std::mem::size_of::<DramItem>() + 24;
/// Sealed chunks queued for the writer thread at most (backpressure beyond).
const WRITE_QUEUE: usize = 2;
/// Buckets a checkpoint copies under the store lock at a time (1 MiB).
const CHECKPOINT_PIECE: usize = 16 << 10;
/// Random DRAM items sampled per eviction (sampled LRU).
const LRU_SAMPLES: usize = 5;

/// `DramItem::bits`: fetched since it entered DRAM (meta `h`).
const FETCHED: u8 = 1;
/// Stale: invalidated by `md I` or stored by `ms I` (meta `X`); kept on flash as
/// [`flash::KIND_SET_STALE`].
const STALE: u8 = 2;
/// A client was handed the right to recache it (meta `W`; later fetches see `Z`).
const TOKEN: u8 = 4;
/// Just read back from flash by [`Store::prefetch`] for a get that will answer it from DRAM:
/// that get counts a flash hit, not a DRAM hit.
const FROM_FLASH: u8 = 8;
/// Flash records one [`Store::prefetch`] reads at most.
const PREFETCH_KEYS: usize = 64;
/// Blocking tasks one [`Store::prefetch`] spreads its reads over.
const PREFETCH_TASKS: usize = 8;

impl Geometry {
    /// The sizes a configuration asks for, or why they do not work.
    pub fn of(cfg: &StoreConfig) -> Result<Geometry> {
        if cfg.item_max < 1024 || cfg.item_max as u64 > VLEN_MAX {
            return Err(CacheError::Config(format!(
                "item size limit {} out of range (1 KiB to {} bytes)",
                cfg.item_max, VLEN_MAX
            )));
        }
        if cfg.flash_path.is_none() {
            return Geometry::dram_only(cfg);
        }
        if !cfg.evictions {
            return Err(CacheError::Config(
                "evictions can be turned off (memcached's -M) only without a flash file: the \
                 flash log always makes room by reclaiming its oldest chunk"
                    .into(),
            ));
        }
        // Room for the largest record, sealed (seal header, tag, an incompressible page stored).
        let largest = flash::record_len(KEY_MAX, cfg.item_max) + CHUNK_HEADER + 8192;
        let chunk_size = flash::round_up(largest.max(1 << 20), ALIGN) as u64;
        let nchunks = cfg.flash_size / chunk_size;
        if nchunks < 8 {
            return Err(CacheError::Config(format!(
                "flash size {} is too small: at least 8 chunks of {} bytes",
                cfg.flash_size, chunk_size
            )));
        }
        if !Index::log_fits(nchunks, chunk_size) {
            return Err(CacheError::Config(format!(
                "flash size {} is too large: the index tells apart log addresses within {} \
                 bytes, enough for about half of that",
                cfg.flash_size,
                crate::index::LOG_WINDOW
            )));
        }
        let entries = (cfg.flash_size / cfg.avg_item_size.max(64) as u64).max(4096);
        let nbuckets = Index::buckets_for(entries);
        let index_bytes = nbuckets * BUCKET_BYTES as u64;
        let buffers = chunk_size * (WRITE_QUEUE as u64 + 2);
        let fixed = index_bytes + buffers;
        if cfg.memory < fixed + 2 * chunk_size {
            return Err(CacheError::Config(format!(
                "memory {} bytes is too small: the index takes {} and the log buffers {}; \
                 give at least {} bytes (or a smaller flash size / larger average item size)",
                cfg.memory,
                index_bytes,
                buffers,
                fixed + 2 * chunk_size
            )));
        }
        Ok(Geometry {
            chunk_size,
            nchunks,
            nbuckets,
            dram_budget: (cfg.memory - fixed) as usize,
        })
    }

    /// Without flash: the index gets `2 * memory / avg_item_size` entries (half full when the
    /// values fill DRAM: a key's two buckets are then never both full, so `-M` refuses only for
    /// memory, never for a bucket conflict), the values the rest; no log chunks.
    fn dram_only(cfg: &StoreConfig) -> Result<Geometry> {
        let entries = (2 * cfg.memory / cfg.avg_item_size.max(64) as u64).max(4096);
        let nbuckets = Index::buckets_for(entries);
        let index_bytes = nbuckets * 64;
        // Room for the index and one item of the largest size: memcached starts with `-m 2`
        // too, and answers `SERVER_ERROR out of memory` (with -M) once that is full.
        let least = index_bytes + cfg.item_max as u64 + DRAM_ITEM_OVERHEAD as u64;
        if cfg.memory < least {
            return Err(CacheError::Config(format!(
                "memory {} bytes is too small: the index takes {} and the largest items need \
                 {} more; give at least {} bytes (or a larger average item size)",
                cfg.memory,
                index_bytes,
                least - index_bytes,
                least
            )));
        }
        Ok(Geometry {
            chunk_size: 0,
            nchunks: 0,
            nbuckets,
            dram_budget: (cfg.memory - index_bytes) as usize,
        })
    }

    /// Whether the store has a flash tier.
    pub fn has_flash(&self) -> bool {
        self.nchunks > 0
    }
}

/// RAM and swap of this machine, in bytes (`None` where the system does not say).
fn machine_memory() -> Option<u64> {
    let si = nix::sys::sysinfo::sysinfo().ok()?;
    Some(si.ram_total().saturating_add(si.swap_total()))
}

/// `cache_memlimit` asked for less than the index and the log buffers need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot set maxbytes to less than {}m", min.div_ceil(1 << 20))]
pub struct MemLimitTooSmall {
    /// The smallest budget, in bytes.
    pub min: u64,
}

/// The whole cache as one item class ([`Store::class_summary`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSummary {
    /// Items stored.
    pub items: u64,
    /// Of them, with their value in DRAM.
    pub dram_items: u64,
    /// Items evicted (their flash chunk was reclaimed while they were live).
    pub evicted: u64,
    /// Items whose space was reclaimed.
    pub reclaimed: u64,
    /// Bytes of values held in DRAM.
    pub dram_bytes: u64,
}

/// Counters bumped outside the store lock.
#[derive(Default)]
pub struct Counters {
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub get_expired: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Connections closed for idling past `-o idle_timeout`.
    pub idle_kicks: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub flash_reads: AtomicU64,
    pub flash_read_bytes: AtomicU64,
    pub flash_read_errors: AtomicU64,
    pub flash_write_errors: AtomicU64,
    pub flash_hits: AtomicU64,
    pub dram_hits: AtomicU64,
    pub log_buffer_hits: AtomicU64,
    pub index_false_positives: AtomicU64,
    pub damaged_records: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Stores refused because the value does not fit with evictions off (`-M`).
    pub store_no_memory: AtomicU64,
    /// Stores refused because the value is over the item size limit (`-I`).
    pub store_too_large: AtomicU64,
    /// Times a connection gave way to others after `-R` requests in one go.
    pub conn_yields: AtomicU64,
}

struct DramItem {
    /// Key then value.
    data: Box<[u8]>,
    key_len: u8,
    flags: u32,
    exptime: u32,
    cas: u64,
    /// Log address of this value's latest record.
    backing: u64,
    /// Payload bytes of that record (the value, or the sealed blob).
    backing_len: u32,
    clock: u32,
    kh: KeyHash,
    /// Unix time of the last access (meta `l`), from when the item entered DRAM.
    atime: u32,
    /// [`FETCHED`], [`STALE`], [`TOKEN`].
    bits: u8,
}

impl DramItem {
    /// The log record kind that keeps this item (stale or not).
    fn kind(&self) -> u8 {
        if self.bits & STALE != 0 {
            flash::KIND_SET_STALE
        } else {
            flash::KIND_SET
        }
    }
    fn key(&self) -> &[u8] {
        &self.data[..self.key_len as usize]
    }
    fn value(&self) -> &[u8] {
        &self.data[self.key_len as usize..]
    }
    fn cost(&self) -> usize {
        self.data.len() + DRAM_ITEM_OVERHEAD
    }
}

enum Found {
    Miss,
    Dram(Pos, usize),
    Flash(Pos, u64),
}

enum Job {
    Write {
        offset: u64,
        buf: Arc<AlignedBuf>,
        from: usize,
        to: usize,
        pending: Option<u64>,
    },
    Sync(mpsc::Sender<std::io::Result<()>>),
}

struct Inner {
    index: Index,
    dram: Vec<DramItem>,
    dram_bytes: usize,
    dram_budget: usize,
    /// The DRAM budget as `-m` and `cache_memlimit` set it (index, log buffers, hot values).
    memory_limit: u64,
    clock: u32,
    cas: u64,
    head: u64,
    tail: u64,
    open_no: u64,
    open: AlignedBuf,
    flushed: usize,
    live: Vec<u32>,
    curr_items: u64,
    rng: u64,
    total_items: u64,
    evictions: u64,
    /// Items dropped because their log chunk was reclaimed (`flash_reclaimed_items`).
    reclaimed_items: u64,
    reclaimed_chunks: u64,
    /// memcached's `reclaimed`: stores that took the room of an expired or flushed item.
    reused: u64,
    /// Items flushed or found expired whose room no store has taken yet.
    reusable: u64,
    /// memcached's `bytes`: its item size (header, key, suffix, value and `\r\n`, cas) summed
    /// over the items whose value is in DRAM.
    item_bytes: u64,
    /// With CAS off, the second of the last `flush_all`: items written in that second count
    /// as flushed too (memcached's cliff without CAS).
    flushed_upto: u32,
    dram_evictions: u64,
    rescued: u64,
    tag_collisions: u64,
    flash_bytes_written: u64,
    geo: Geometry,
    seal: Option<SealHook>,
    /// Payload bytes of the record `append` wrote last.
    last_payload: usize,
    seal_errors: u64,
    writer: mpsc::SyncSender<Job>,
    pending: Arc<Mutex<HashMap<u64, Arc<AlignedBuf>>>>,
    /// Whether a full cache evicts (`StoreConfig::evictions`); off: stores fail instead.
    evictions_on: bool,
    /// Whether items get CAS values (`StoreConfig::cas`).
    cas_on: bool,
}

/// A store that would need an eviction while evictions are off.
struct NoRoom;

/// The store shared by all connections.
pub struct Store {
    inner: Mutex<Inner>,
    /// The flash file; `None` in the DRAM-only mode.
    flash: Option<Arc<FlashFile>>,
    pending: Arc<Mutex<HashMap<u64, Arc<AlignedBuf>>>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    pub counters: Arc<Counters>,
    pub geo: Geometry,
    cfg: StoreConfig,
    ckpt_path: Option<PathBuf>,
    started: Instant,
    /// What recovery found, for the log and for stats.
    pub recovery: RecoveryReport,
    settings: Settings,
    closed: AtomicBool,
    /// Woken by the `shutdown` command (`Settings::shutdown_command`); the server waits on it.
    shutdown: tokio::sync::Notify,
    /// The server's open connections (`stats conns`).
    pub conns: Arc<crate::conns::Conns>,
    /// Authentication and TLS counters and settings (`stats`, `stats settings`).
    pub access: Arc<crate::access::AccessCounters>,
    /// The log level (`Settings::verbosity`, changed by the `verbosity` command).
    verbosity: std::sync::atomic::AtomicU8,
    /// Bumped by every `flush_all`: a delayed one fires only if no later one came.
    flush_generation: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn expired(exptime: u32, now: u32) -> bool {
    exptime != 0 && exptime <= now
}

impl Inner {
    /// memcached's size of an item (`ITEM_ntotal`): a 48-byte header, the key and its NUL, 4
    /// bytes of flags when they are not 0, the value and its `\r\n`, 8 bytes of cas with CAS.
    fn mc_size(&self, it: &DramItem) -> u64 {
        let flags = if it.flags == 0 { 0 } else { 4 };
        let cas = if self.cas_on { 8 } else { 0 };
        (48 + it.key_len as usize + 1 + flags + it.data.len() - it.key_len as usize + 2 + cas)
            as u64
    }

    fn phys(&self, addr: u64) -> usize {
        ((addr / self.geo.chunk_size) % self.geo.nchunks) as usize
    }

    /// Where the entry at `pos` points (flash addresses are read against the log head).
    fn loc(&self, pos: Pos) -> Loc {
        self.index.get(pos).loc(self.head)
    }

    fn tick(&mut self) -> u32 {
        self.clock = self.clock.wrapping_add(1);
        self.clock
    }

    fn next_cas(&mut self) -> u64 {
        if !self.cas_on {
            return 0;
        }
        self.cas += 1;
        self.cas
    }

    /// Whether a request's cas `want` fails against the item's `have` (never with CAS off, as
    /// in memcached: every cas is 0 then).
    fn cas_differs(&self, want: u64, have: u64) -> bool {
        self.cas_on && want != have
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn lookup(&mut self, key: &[u8], kh: KeyHash) -> Found {
        let Some(pos) = self.index.find(kh, key.len()) else {
            return Found::Miss;
        };
        match self.loc(pos) {
            Loc::Dram(slot) => {
                let slot = slot as usize;
                if slot < self.dram.len() && self.dram[slot].key() == key {
                    if self.flushed_upto != 0 && self.dram[slot].atime <= self.flushed_upto {
                        // Written in the second of a flush_all without CAS: flushed too.
                        self.remove_entry(pos);
                        self.reusable += 1;
                        return Found::Miss;
                    }
                    Found::Dram(pos, slot)
                } else {
                    Found::Miss
                }
            }
            Loc::Flash(addr) => {
                if addr < self.tail {
                    // Its chunk was reclaimed: drop the dead entry (already uncounted).
                    *self.index.get_mut(pos) = Entry::default();
                    Found::Miss
                } else {
                    Found::Flash(pos, addr)
                }
            }
        }
    }

    /// Bytes to read for the record of the flash entry at `pos` (address `addr`): its length
    /// from the entry (rounded up there), stopped at the chunk's end.
    fn record_len_at(&self, pos: Pos, addr: u64) -> usize {
        let e = *self.index.get(pos);
        let len = if self.seal.is_some() {
            flash::record_len(0, e.value_len())
        } else {
            flash::record_len(e.key_len(), e.value_len())
        };
        len.min((self.geo.chunk_size - addr % self.geo.chunk_size) as usize)
    }

    fn remove_entry(&mut self, pos: Pos) {
        let e = *self.index.get(pos);
        if e.is_empty() {
            return;
        }
        match self.loc(pos) {
            Loc::Dram(slot) => {
                self.dram_remove(slot as usize);
                self.curr_items -= 1;
            }
            Loc::Flash(addr) => {
                if addr >= self.tail {
                    let p = self.phys(addr);
                    self.live[p] = self.live[p].saturating_sub(1);
                    self.curr_items -= 1;
                }
            }
        }
        *self.index.get_mut(pos) = Entry::default();
    }

    /// Removes a DRAM item, keeping the vector dense: the last item moves into the hole and its
    /// index entry (found through the item's hash: the backward pointer) is updated.
    fn dram_remove(&mut self, slot: usize) -> Option<DramItem> {
        if slot >= self.dram.len() {
            return None;
        }
        let last = self.dram.len() - 1;
        let item = self.dram.swap_remove(slot);
        self.dram_bytes -= item.cost();
        self.item_bytes -= self.mc_size(&item);
        if slot != last {
            let kh = self.dram[slot].kh;
            if let Some(pos) = self.index.find_loc(kh, Loc::Dram(last as u64)) {
                self.index.get_mut(pos).set_loc(Loc::Dram(slot as u64));
            }
        }
        Some(item)
    }

    /// Appends a record to the log and returns its address.
    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        kind: u8,
        flags: u32,
        exptime: u32,
        cas: u64,
        key: &[u8],
        value: &[u8],
    ) -> u64 {
        if !self.geo.has_flash() {
            // DRAM only: no log.
            self.last_payload = 0;
            return 0;
        }
        let blob;
        let (kind, key, value) = match (&self.seal, kind) {
            (Some(h), flash::KIND_SET | flash::KIND_DELETE | flash::KIND_SET_STALE) => {
                let mut plain = Vec::with_capacity(1 + key.len() + value.len());
                plain.push(key.len() as u8);
                plain.extend_from_slice(key);
                plain.extend_from_slice(value);
                blob = match h.0.seal(&plain) {
                    Ok(b) => b,
                    Err(e) => {
                        // Never write it in the clear: an empty record, a miss when read.
                        self.seal_errors += 1;
                        if self.seal_errors == 1 {
                            eprintln!("inpath cache: sealing a record failed: {e}");
                        }
                        Vec::new()
                    }
                };
                (kind | flash::SEALED, &[][..], &blob[..])
            }
            _ => (kind, key, value),
        };
        let cs = self.geo.chunk_size;
        let (kind, key, value) =
            if flash::record_len(key.len(), value.len()) + CHUNK_HEADER > cs as usize {
                // Cannot happen with the chunk size from `Geometry` (it leaves room for
                // sealing): an empty record that replay skips and a read treats as a miss,
                // rather than a torn chunk.
                self.seal_errors += 1;
                (flash::KIND_DELETE | flash::SEALED, &[][..], &[][..])
            } else {
                (kind, key, value)
            };
        self.last_payload = value.len();
        let len = flash::record_len(key.len(), value.len());
        if self.head - self.open_no * cs + len as u64 > cs {
            self.seal_open();
        }
        let addr = self.head;
        let off = (addr - self.open_no * cs) as usize;
        flash::encode_record(
            &mut self.open.as_mut_slice()[off..],
            kind,
            flags,
            exptime,
            cas,
            addr,
            key,
            value,
        );
        self.head += len as u64;
        self.flash_bytes_written += len as u64;
        addr
    }

    /// Hands the open chunk to the writer and opens the next one, reclaiming the oldest chunk
    /// when the log has wrapped.
    fn seal_open(&mut self) {
        let cs = self.geo.chunk_size;
        let full = std::mem::replace(&mut self.open, AlignedBuf::zeroed(cs as usize));
        let full = Arc::new(full);
        let no = self.open_no;
        lock(&self.pending).insert(no, full.clone());
        let from = self.flushed / ALIGN * ALIGN;
        let _ = self.writer.send(Job::Write {
            offset: self.phys(no * cs) as u64 * cs,
            buf: full,
            from,
            to: cs as usize,
            pending: Some(no),
        });
        self.open_chunk(no + 1);
    }

    fn open_chunk(&mut self, no: u64) {
        let cs = self.geo.chunk_size;
        self.open_no = no;
        self.open.as_mut_slice().fill(0);
        flash::write_chunk_header(self.open.as_mut_slice(), no, cs);
        self.head = no * cs + CHUNK_HEADER as u64;
        self.flushed = 0;
        if no >= self.geo.nchunks {
            let new_tail = (no + 1 - self.geo.nchunks) * cs;
            if new_tail > self.tail {
                let p = self.phys(no * cs);
                self.curr_items -= self.live[p] as u64;
                self.reclaimed_items += self.live[p] as u64;
                self.evictions += self.live[p] as u64;
                self.live[p] = 0;
                self.reclaimed_chunks += 1;
                self.tail = new_tail;
            }
        }
        // Dead entries go before their stored address could name a live record (index.rs).
        self.index.sweep(self.geo.nchunks, self.head, self.tail);
    }

    /// Sends the unwritten part of the open chunk to the writer (a copy: the chunk keeps filling).
    fn flush_open(&mut self) {
        if !self.geo.has_flash() {
            return;
        }
        let cs = self.geo.chunk_size;
        let end = (self.head - self.open_no * cs) as usize;
        if end <= self.flushed {
            return;
        }
        let from = self.flushed / ALIGN * ALIGN;
        let to = flash::round_up(end, ALIGN).min(cs as usize);
        let mut copy = AlignedBuf::zeroed(to - from);
        copy.as_mut_slice()[..to - from].copy_from_slice(&self.open.as_slice()[from..to]);
        let _ = self.writer.send(Job::Write {
            offset: self.phys(self.open_no * cs) as u64 * cs + from as u64,
            buf: Arc::new(copy),
            from: 0,
            to: to - from,
            pending: None,
        });
        self.flushed = end;
    }

    /// Evicts DRAM items until `need` more bytes fit: the oldest of a few random samples goes
    /// to flash (its index entry now points at its log record).
    fn make_room(&mut self, need: usize, now: u32) {
        while self.dram_bytes + need > self.dram_budget && !self.dram.is_empty() {
            let n = self.dram.len() as u64;
            let mut victim = (self.rand() % n) as usize;
            for _ in 1..LRU_SAMPLES {
                let s = (self.rand() % n) as usize;
                if self.clock.wrapping_sub(self.dram[s].clock)
                    > self.clock.wrapping_sub(self.dram[victim].clock)
                {
                    victim = s;
                }
            }
            self.evict_to_flash(victim, now);
        }
    }

    /// Writes DRAM item `slot` again at the head of the log with its current fields (its old
    /// record was reclaimed, or its expiry, cas or bits changed), points the item at the new
    /// record and returns its address.
    fn rewrite_record(&mut self, slot: usize) -> u64 {
        let it = &self.dram[slot];
        let (flags, exptime, cas, kind) = (it.flags, it.exptime, it.cas, it.kind());
        let data = std::mem::take(&mut self.dram[slot].data);
        let kl = self.dram[slot].key_len as usize;
        let at = self.append(kind, flags, exptime, cas, &data[..kl], &data[kl..]);
        let item = &mut self.dram[slot];
        item.data = data;
        item.backing = at;
        item.backing_len = self.last_payload as u32;
        at
    }

    fn evict_to_flash(&mut self, slot: usize, now: u32) {
        let kh = self.dram[slot].kh;
        let Some(pos) = self.index.find_loc(kh, Loc::Dram(slot as u64)) else {
            self.dram_remove(slot);
            return;
        };
        self.dram_evictions += 1;
        if expired(self.dram[slot].exptime, now) {
            self.remove_entry(pos);
            self.reusable += 1;
            return;
        }
        if !self.geo.has_flash() {
            // DRAM only: the victim leaves the cache.
            self.evictions += 1;
            self.remove_entry(pos);
            return;
        }
        let mut backing = self.dram[slot].backing;
        if backing < self.tail {
            // Its record was reclaimed: write it again at the head of the log.
            backing = self.rewrite_record(slot);
            self.rescued += 1;
        }
        let p = self.phys(backing);
        self.live[p] += 1;
        let blen = self.dram[slot].backing_len as usize;
        let e = self.index.get_mut(pos);
        e.set_loc(Loc::Flash(backing));
        e.set_value_len(blen);
        self.dram_remove(slot);
    }

    /// Puts a new version of `key` in DRAM, replacing what the index holds for it. `backing` is
    /// the address of its log record.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        key: &[u8],
        kh: KeyHash,
        flags: u32,
        exptime: u32,
        cas: u64,
        value: &[u8],
        backing: u64,
        backing_len: usize,
        now: u32,
        bits: u8,
    ) -> std::result::Result<usize, NoRoom> {
        if let Some(pos) = self.index.find(kh, key.len()) {
            if let Loc::Dram(slot) = self.loc(pos) {
                // The key's old value had expired: its room is taken again (memcached's
                // `reclaimed`).
                if self
                    .dram
                    .get(slot as usize)
                    .is_some_and(|it| expired(it.exptime, now))
                {
                    self.reusable += 1;
                }
            }
            self.remove_entry(pos);
        }
        let cost = key.len() + value.len() + DRAM_ITEM_OVERHEAD;
        if !self.evictions_on && self.dram_bytes + cost > self.dram_budget {
            return Err(NoRoom);
        }
        let mut data = Vec::with_capacity(key.len() + value.len());
        data.extend_from_slice(key);
        data.extend_from_slice(value);
        let clock = self.tick();
        let item = DramItem {
            data: data.into_boxed_slice(),
            key_len: key.len() as u8,
            flags,
            exptime,
            cas,
            backing,
            backing_len: backing_len as u32,
            clock,
            kh,
            atime: now,
            bits,
        };
        self.make_room(item.cost(), now);
        let (head, tail) = (self.head, self.tail);
        let (pos, alt) = self.index.victim(kh, clock, |e| match e.loc(head) {
            Loc::Flash(a) => a < tail,
            Loc::Dram(_) => false,
        });
        let old = *self.index.get(pos);
        if !old.is_empty() {
            let live = match old.loc(head) {
                Loc::Flash(a) => a >= tail,
                Loc::Dram(_) => true,
            };
            if live {
                if !self.evictions_on {
                    // Both buckets of the key are full of live items: no eviction allowed.
                    return Err(NoRoom);
                }
                self.evictions += 1;
            }
            self.remove_entry(pos);
        }
        self.dram_bytes += item.cost();
        self.item_bytes += self.mc_size(&item);
        self.dram.push(item);
        let slot = self.dram.len() - 1;
        *self.index.get_mut(pos) = Entry::new(
            Loc::Dram(slot as u64),
            key.len(),
            kh.tag,
            value.len(),
            clock,
            alt,
        );
        self.curr_items += 1;
        self.total_items += 1;
        Ok(slot)
    }

    /// Writes a new version (log record, then DRAM) and returns its cas.
    #[allow(clippy::too_many_arguments)]
    fn write_item(
        &mut self,
        key: &[u8],
        kh: KeyHash,
        flags: u32,
        exptime: u32,
        value: &[u8],
        new_cas: Option<u64>,
        now: u32,
    ) -> std::result::Result<u64, NoRoom> {
        self.write_item_with(key, kh, flags, exptime, value, new_cas, now, 0)
    }

    /// [`Inner::write_item`] for an item with these [`DramItem::bits`] (stale, token sent).
    #[allow(clippy::too_many_arguments)]
    fn write_item_with(
        &mut self,
        key: &[u8],
        kh: KeyHash,
        flags: u32,
        exptime: u32,
        value: &[u8],
        new_cas: Option<u64>,
        now: u32,
        bits: u8,
    ) -> std::result::Result<u64, NoRoom> {
        let cas = match new_cas {
            Some(c) if self.cas_on => {
                self.cas = self.cas.max(c);
                c
            }
            _ => self.next_cas(),
        };
        let kind = if bits & STALE != 0 {
            flash::KIND_SET_STALE
        } else {
            flash::KIND_SET
        };
        let addr = self.append(kind, flags, exptime, cas, key, value);
        let blen = self.last_payload;
        self.insert(key, kh, flags, exptime, cas, value, addr, blen, now, bits)?;
        if self.reusable > 0 {
            self.reusable -= 1;
            self.reused += 1;
        }
        Ok(cas)
    }

    /// An access: the item moves up the LRU, is marked fetched and its access time is `now`.
    fn bump(&mut self, pos: Pos, slot: usize, now: u32) {
        let c = self.tick();
        self.index.get_mut(pos).set_clock(c);
        let it = &mut self.dram[slot];
        it.clock = c;
        it.atime = now;
        it.bits |= FETCHED;
    }

    fn item_out(&self, slot: usize) -> ItemOut {
        let it = &self.dram[slot];
        ItemOut {
            flags: it.flags,
            cas: it.cas,
            exptime: it.exptime,
            value: it.value().to_vec(),
        }
    }

    /// Takes over what recovery rebuilt in the index: sets the tail and opens chunk `open_no`
    /// for new writes; recounts live entries and drops dead ones. Returns the number of items.
    fn finish_recovery(&mut self, tail: u64, open_no: u64) -> u64 {
        self.tail = tail;
        self.live.fill(0);
        self.curr_items = 0;
        let cs = self.geo.chunk_size;
        let nch = self.geo.nchunks;
        for b in self.index.buckets.iter_mut() {
            for e in b.e.iter_mut() {
                if e.is_empty() {
                    continue;
                }
                match e.loc(open_no * cs) {
                    Loc::Flash(a) if a >= tail && a < open_no * cs => {
                        self.live[((a / cs) % nch) as usize] += 1;
                        self.curr_items += 1;
                    }
                    _ => *e = Entry::default(),
                }
            }
        }
        self.open_chunk(open_no);
        self.curr_items
    }

    fn clear_all(&mut self) {
        self.reusable += self.curr_items;
        if !self.cas_on {
            self.flushed_upto = now_unix();
        }
        self.index.clear();
        self.dram.clear();
        self.dram_bytes = 0;
        self.item_bytes = 0;
        self.live.fill(0);
        self.curr_items = 0;
    }
}

/// What a resolved key is, under the lock: absent, or in DRAM at this entry and slot.
type Current = Option<(Pos, usize)>;

impl Store {
    /// Opens (or creates) the flash file and recovers what it and the checkpoint hold; not run
    /// by a server (`stats` reports 0 threads).
    pub fn open(cfg: StoreConfig) -> Result<Arc<Store>> {
        Store::open_with(cfg, Settings::default())
    }

    /// [`Store::open`] for a store that a server with these settings runs.
    pub fn open_with(cfg: StoreConfig, settings: Settings) -> Result<Arc<Store>> {
        let geo = Geometry::of(&cfg)?;
        if let Some(ram) = machine_memory() {
            if cfg.memory > ram {
                return Err(CacheError::Config(format!(
                    "memory {} bytes ({} MiB) is more than this machine has: {} bytes ({} MiB) \
                     of RAM and swap; give at most that (memcached's -m counts megabytes)",
                    cfg.memory,
                    cfg.memory >> 20,
                    ram,
                    ram >> 20
                )));
            }
        }
        let flash_size = geo.chunk_size * geo.nchunks;
        let flash = match &cfg.flash_path {
            Some(path) => Some(Arc::new(
                FlashFile::open(path, cfg.flash_size.max(flash_size))?
                    .with_faults(cfg.faults.clone()),
            )),
            None => None,
        };
        let ckpt_path = cfg.flash_path.as_ref().map(|path| {
            let mut p = path.clone().into_os_string();
            p.push(".ckpt");
            PathBuf::from(p)
        });
        let pending: Arc<Mutex<HashMap<u64, Arc<AlignedBuf>>>> = Arc::default();
        let counters = Arc::new(Counters::default());
        let (tx, rx) = mpsc::sync_channel::<Job>(WRITE_QUEUE);
        let writer_thread = match &flash {
            Some(flash) => {
                let flash = flash.clone();
                let pending = pending.clone();
                let counters = counters.clone();
                let verbose = cfg.verbose;
                Some(
                    std::thread::Builder::new()
                        .name("inpath-cache-writer".into())
                        .spawn(move || writer_loop(rx, flash, pending, counters, verbose))?,
                )
            }
            // DRAM only: nothing is ever sent to a writer.
            None => None,
        };
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        let index = Index::try_new(geo.nbuckets as usize).ok_or_else(|| {
            CacheError::Config(format!(
                "memory {} bytes: the index's {} bytes could not be allocated",
                cfg.memory,
                geo.nbuckets * BUCKET_BYTES as u64
            ))
        })?;
        let mut inner = Inner {
            index,
            dram: Vec::new(),
            dram_bytes: 0,
            dram_budget: geo.dram_budget,
            memory_limit: cfg.memory,
            clock: 0,
            cas: 0,
            head: CHUNK_HEADER as u64,
            tail: 0,
            open_no: 0,
            open: AlignedBuf::zeroed((geo.chunk_size as usize).max(ALIGN)),
            flushed: 0,
            live: vec![0; geo.nchunks as usize],
            curr_items: 0,
            rng: seed,
            total_items: 0,
            evictions: 0,
            reclaimed_items: 0,
            reclaimed_chunks: 0,
            reused: 0,
            reusable: 0,
            item_bytes: 0,
            flushed_upto: 0,
            dram_evictions: 0,
            rescued: 0,
            tag_collisions: 0,
            flash_bytes_written: 0,
            geo,
            seal: cfg.seal.clone(),
            last_payload: 0,
            seal_errors: 0,
            writer: tx,
            pending: pending.clone(),
            evictions_on: cfg.evictions,
            cas_on: cfg.cas,
        };
        let recovery = match (&flash, &ckpt_path, &cfg.flash_path) {
            (Some(flash), Some(ckpt_path), Some(path)) => {
                let rec =
                    recover::recover(&mut inner.index, geo, cfg.seal.as_ref(), flash, ckpt_path)
                        .map_err(|e| CacheError::Flash {
                            path: path.display().to_string(),
                            source: e,
                        })?;
                inner.cas = inner.cas.max(rec.cas);
                inner.clock = rec.clock;
                let mut recovery = rec.report;
                recovery.items = inner.finish_recovery(rec.tail, rec.open_no);
                recovery
            }
            _ => RecoveryReport {
                checkpoint_note: "no flash file: DRAM only, nothing to recover".into(),
                ..RecoveryReport::default()
            },
        };
        Ok(Arc::new(Store {
            inner: Mutex::new(inner),
            flash,
            pending,
            writer_thread: Mutex::new(writer_thread),
            counters,
            geo,
            cfg,
            ckpt_path,
            started: Instant::now(),
            recovery,
            settings,
            closed: AtomicBool::new(false),
            shutdown: tokio::sync::Notify::new(),
            conns: Arc::default(),
            access: Arc::default(),
            verbosity: std::sync::atomic::AtomicU8::new(settings.verbosity),
            flush_generation: AtomicU64::new(0),
        }))
    }

    /// The settings of the server this store runs under.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// The DRAM budget in bytes.
    pub fn memory(&self) -> u64 {
        self.cfg.memory
    }

    pub fn item_max(&self) -> usize {
        self.cfg.item_max
    }

    /// Whether `flush_all` is served (`StoreConfig::flush_all`, memcached's `-F`).
    pub fn flush_all_enabled(&self) -> bool {
        self.cfg.flush_all
    }

    /// The log level: 1 errors and warnings, 2 also connections and request lines.
    pub fn verbosity(&self) -> u8 {
        self.verbosity.load(Relaxed)
    }

    /// Sets the log level (the `verbosity` command; above 2 is 2, as memcached).
    pub fn set_verbosity(&self, level: u64) {
        self.verbosity.store(level.min(2) as u8, Relaxed);
    }

    /// Asks the server running this store to stop (the `shutdown` command).
    pub fn request_shutdown(&self) {
        self.shutdown.notify_one();
    }

    /// Resolves once [`Store::request_shutdown`] was called.
    pub async fn shutdown_requested(&self) {
        self.shutdown.notified().await;
    }

    /// Whether a full cache evicts (memcached's `-M` turns it off).
    pub fn evictions_enabled(&self) -> bool {
        self.cfg.evictions
    }

    /// Whether items carry CAS values (memcached's `-C` turns it off).
    pub fn cas_enabled(&self) -> bool {
        self.cfg.cas
    }

    /// Whether values have a flash tier (`false`: the DRAM-only mode).
    pub fn has_flash(&self) -> bool {
        self.flash.is_some()
    }

    /// The DRAM budget now (`-m`, or the last `cache_memlimit`), in bytes.
    pub fn memory_limit(&self) -> u64 {
        lock(&self.inner).memory_limit
    }

    /// Sets the DRAM budget to `bytes` (memcached's `cache_memlimit`): the index and the log
    /// buffers keep their size, the hot values get the rest, and values over the new budget
    /// leave DRAM for their flash records (they stay readable). A budget that leaves no room
    /// for two log chunks of values is refused with the smallest one that does.
    pub fn set_memory_limit(&self, bytes: u64) -> std::result::Result<(), MemLimitTooSmall> {
        let mut g = lock(&self.inner);
        let fixed = self.cfg.memory - self.geo.dram_budget as u64;
        // Room for two log chunks of values (DRAM only: for 1 MiB of values).
        let min = fixed + (2 * self.geo.chunk_size).max(1 << 20);
        if bytes < min {
            return Err(MemLimitTooSmall { min });
        }
        g.memory_limit = bytes;
        g.dram_budget = usize::try_from(bytes - fixed).unwrap_or(usize::MAX);
        let now = now_unix();
        g.make_room(0, now);
        Ok(())
    }

    /// Zeroes the counters memcached's `stats reset` zeroes: commands, hits and misses, bytes
    /// read and written, connections served (not the current ones), items stored, evictions.
    /// What the cache holds is not touched.
    pub fn reset_stats(&self) {
        let c = &self.counters;
        for a in [
            &c.cmd_get,
            &c.cmd_set,
            &c.cmd_flush,
            &c.cmd_touch,
            &c.get_hits,
            &c.get_misses,
            &c.get_expired,
            &c.delete_hits,
            &c.delete_misses,
            &c.incr_hits,
            &c.incr_misses,
            &c.decr_hits,
            &c.decr_misses,
            &c.cas_hits,
            &c.cas_misses,
            &c.cas_badval,
            &c.touch_hits,
            &c.touch_misses,
            &c.total_connections,
            &c.rejected_connections,
            &c.bytes_read,
            &c.bytes_written,
            &c.dram_hits,
            &c.flash_hits,
            &c.log_buffer_hits,
        ] {
            a.store(0, Relaxed);
        }
        let mut g = lock(&self.inner);
        g.total_items = 0;
        g.evictions = 0;
        g.reclaimed_items = 0;
        g.reused = 0;
        g.dram_evictions = 0;
    }

    /// What `stats items` and `stats slabs` report: the cache has no slab classes, so it is one
    /// class, `1`, holding every item: items in all, in DRAM, evictions and items reclaimed,
    /// and the bytes of values held in DRAM.
    pub fn class_summary(&self) -> ClassSummary {
        let g = lock(&self.inner);
        ClassSummary {
            items: g.curr_items,
            dram_items: g.dram.len() as u64,
            evicted: g.evictions,
            reclaimed: g.reused,
            dram_bytes: g.dram_bytes as u64,
        }
    }

    /// `stats cachedump`: up to `limit` items (0: all) whose values are in DRAM, most recently
    /// used first, each as (key, value bytes, absolute expiry or 0). Items only on flash are
    /// not listed (their keys are on flash: a read each).
    pub fn cachedump(&self, limit: usize) -> Vec<(Vec<u8>, usize, u32)> {
        let g = lock(&self.inner);
        let clock = g.clock;
        let mut order: Vec<(u32, usize)> = g
            .dram
            .iter()
            .enumerate()
            .map(|(i, it)| (clock.wrapping_sub(it.clock), i))
            .collect();
        if limit > 0 && limit < order.len() {
            order.select_nth_unstable(limit);
            order.truncate(limit);
        }
        order.sort_unstable();
        order
            .into_iter()
            .map(|(_, i)| {
                let it = &g.dram[i];
                (it.key().to_vec(), it.value().len(), it.exptime)
            })
            .collect()
    }

    pub fn flash_direct(&self) -> bool {
        self.flash.as_ref().is_some_and(|f| f.direct)
    }

    /// Reads the record at `addr` (`len` bytes) with one aligned pread, or from a sealed chunk
    /// still waiting for the writer.
    fn read_record(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let cs = self.geo.chunk_size;
        let no = addr / cs;
        let off = (addr % cs) as usize;
        if off + len > cs as usize {
            return None;
        }
        if let Some(buf) = lock(&self.pending).get(&no).cloned() {
            self.counters.log_buffer_hits.fetch_add(1, Relaxed);
            return Some(buf.as_slice()[off..off + len].to_vec());
        }
        let phys = (no % self.geo.nchunks) * cs + off as u64;
        let start = phys / ALIGN as u64 * ALIGN as u64;
        let end = flash::round_up((phys + len as u64) as usize, ALIGN) as u64;
        let mut buf = AlignedBuf::zeroed((end - start) as usize);
        self.counters.flash_reads.fetch_add(1, Relaxed);
        self.counters
            .flash_read_bytes
            .fetch_add(end - start, Relaxed);
        let flash = self.flash.as_ref()?;
        match flash.read_at(buf.as_mut_slice(), start) {
            Ok(()) => {
                let s = (phys - start) as usize;
                Some(buf.as_slice()[s..s + len].to_vec())
            }
            Err(e) => {
                self.counters.flash_read_errors.fetch_add(1, Relaxed);
                if self.cfg.verbose {
                    eprintln!("inpath cache: flash read at {start}: {e}");
                }
                None
            }
        }
    }

    /// Finds `key` and brings a flash-resident value into DRAM (one flash read, off the async
    /// workers), then calls `f` under the lock with the current state: `None` when absent or
    /// expired. An index miss touches no flash.
    async fn with_current<R>(
        self: &Arc<Self>,
        key: &[u8],
        mut f: impl FnMut(&mut Inner, Current, u32) -> R,
    ) -> R {
        let kh = KeyHash::of(key);
        let mut attempts = 0;
        loop {
            let now = now_unix();
            let (addr, len) = {
                let mut g = lock(&self.inner);
                let found = g.lookup(key, kh);
                match found {
                    Found::Miss => return f(&mut g, None, now),
                    Found::Dram(pos, slot) => {
                        if expired(g.dram[slot].exptime, now) {
                            g.remove_entry(pos);
                            g.reusable += 1;
                            self.counters.get_expired.fetch_add(1, Relaxed);
                            return f(&mut g, None, now);
                        }
                        self.counters.dram_hits.fetch_add(1, Relaxed);
                        return f(&mut g, Some((pos, slot)), now);
                    }
                    Found::Flash(pos, addr) => {
                        let len = g.record_len_at(pos, addr);
                        if addr / g.geo.chunk_size == g.open_no || attempts >= 8 {
                            // Still in the open chunk (DRAM): resolve without I/O.
                            let off = (addr % g.geo.chunk_size) as usize;
                            let bytes =
                                g.open.as_slice()[off..(off + len).min(g.open.len())].to_vec();
                            if attempts < 8 {
                                self.counters.log_buffer_hits.fetch_add(1, Relaxed);
                            }
                            let r = self.promote(&mut g, key, kh, pos, addr, &bytes, now);
                            return f(&mut g, r, now);
                        }
                        (addr, len)
                    }
                }
            };
            attempts += 1;
            // The read runs on a blocking thread, so the worker serves its other connections
            // meanwhile (reading on the worker itself measured no cheaper: 59.6 against 50.3 ms
            // of server CPU per 1000 flash hits; PERFORMANCE.md, "cache at scale").
            let this = self.clone();
            let bytes = tokio::task::spawn_blocking(move || this.read_record(addr, len))
                .await
                .ok()
                .flatten();
            let mut g = lock(&self.inner);
            match g.lookup(key, kh) {
                Found::Flash(pos, a) if a == addr => {
                    let bytes = bytes.unwrap_or_default();
                    let r = self.promote(&mut g, key, kh, pos, addr, &bytes, now);
                    if r.is_some() {
                        self.counters.flash_hits.fetch_add(1, Relaxed);
                    }
                    return f(&mut g, r, now);
                }
                // It changed while we read: look again.
                _ => continue,
            }
        }
    }

    /// Checks a record read for the entry at `pos` and moves it into DRAM.
    #[allow(clippy::too_many_arguments)]
    fn promote(
        &self,
        g: &mut Inner,
        key: &[u8],
        kh: KeyHash,
        pos: Pos,
        addr: u64,
        bytes: &[u8],
        now: u32,
    ) -> Current {
        let rec = flash::decode_record(bytes).filter(|r| r.addr == addr);
        let opened = rec.as_ref().and_then(|r| open_record(g.seal.as_ref(), r));
        match (rec, opened) {
            (Some(rec), Some((kind, rkey, value))) if flash::is_set(kind) => {
                if rkey != key {
                    // A tag false positive: this entry belongs to another key.
                    self.counters.index_false_positives.fetch_add(1, Relaxed);
                    return None;
                }
                if expired(rec.exptime, now) {
                    g.remove_entry(pos);
                    g.reusable += 1;
                    self.counters.get_expired.fetch_add(1, Relaxed);
                    return None;
                }
                let (flags, exptime, cas) = (rec.flags, rec.exptime, rec.cas);
                let blen = rec.value.len();
                // With a flash tier evictions are always on: `insert` cannot refuse.
                let bits = if kind == flash::KIND_SET_STALE {
                    STALE
                } else {
                    0
                };
                let slot = g
                    .insert(key, kh, flags, exptime, cas, &value, addr, blen, now, bits)
                    .ok()?;
                g.index
                    .find_loc(kh, Loc::Dram(slot as u64))
                    .map(|p| (p, slot))
            }
            _ => {
                // Damaged or torn: never served; the entry goes.
                self.counters.damaged_records.fetch_add(1, Relaxed);
                g.remove_entry(pos);
                None
            }
        }
    }

    /// get / gets / gat / mg: the value, or `None`. `touch` sets a new absolute expiry.
    pub async fn get(self: &Arc<Self>, key: &[u8], touch: Option<u32>) -> Option<ItemOut> {
        self.counters.cmd_get.fetch_add(1, Relaxed);
        if touch.is_some() {
            self.counters.cmd_touch.fetch_add(1, Relaxed);
        }
        let out = self
            .with_current(key, |g, cur, now| {
                let (pos, slot) = cur?;
                g.bump(pos, slot, now);
                if let Some(exptime) = touch {
                    g.dram[slot].exptime = exptime;
                    g.rewrite_record(slot);
                    if expired(exptime, now_unix()) {
                        let out = g.item_out(slot);
                        g.remove_entry(pos);
                        return Some(out);
                    }
                }
                Some(g.item_out(slot))
            })
            .await;
        self.count_get(out.is_some(), touch.is_some());
        out
    }

    /// Counts a get's outcome: a hit or miss, and of a touch when it set a new expiry.
    fn count_get(&self, hit: bool, touched: bool) {
        let c = &self.counters;
        match (hit, touched) {
            (true, true) => c.touch_hits.fetch_add(1, Relaxed),
            (false, true) => c.touch_misses.fetch_add(1, Relaxed),
            _ => 0,
        };
        if hit {
            c.get_hits.fetch_add(1, Relaxed);
        } else {
            c.get_misses.fetch_add(1, Relaxed);
        }
    }

    /// Plain gets of `keys` answered under one lock without copying values out: for each key
    /// whose value is in DRAM, `hit(i, flags, cas, value)` (a miss is counted and skipped).
    /// Stops before the first key whose value is on flash ([`Resident::Flash`], for the caller
    /// to fetch with [`Store::get`]) or once `hit` returns `false` ([`Resident::Paused`] at the
    /// next key). The fast path of get/gets: one lock and no allocation per key.
    pub fn get_resident(
        &self,
        keys: &[&[u8]],
        mut hit: impl FnMut(usize, u32, u64, &[u8]) -> bool,
    ) -> Resident {
        let c = &self.counters;
        let mut g = lock(&self.inner);
        let now = now_unix();
        let (mut hits, mut misses, mut expired_n, mut from_flash) = (0u64, 0u64, 0u64, 0u64);
        let mut out = Resident::Done;
        for (i, key) in keys.iter().enumerate() {
            let kh = KeyHash::of(key);
            match g.lookup(key, kh) {
                Found::Miss => misses += 1,
                Found::Flash(..) => {
                    out = Resident::Flash(i);
                    break;
                }
                Found::Dram(pos, slot) => {
                    if expired(g.dram[slot].exptime, now) {
                        g.remove_entry(pos);
                        g.reusable += 1;
                        expired_n += 1;
                        misses += 1;
                        continue;
                    }
                    g.bump(pos, slot, now);
                    hits += 1;
                    if g.dram[slot].bits & FROM_FLASH != 0 {
                        g.dram[slot].bits &= !FROM_FLASH;
                        from_flash += 1;
                    }
                    let it = &g.dram[slot];
                    if !hit(i, it.flags, it.cas, it.value()) {
                        out = Resident::Paused(i + 1);
                        break;
                    }
                }
            }
        }
        drop(g);
        c.cmd_get.fetch_add(hits + misses, Relaxed);
        c.get_hits.fetch_add(hits, Relaxed);
        c.dram_hits.fetch_add(hits - from_flash, Relaxed);
        c.flash_hits.fetch_add(from_flash, Relaxed);
        c.get_misses.fetch_add(misses, Relaxed);
        if expired_n > 0 {
            c.get_expired.fetch_add(expired_n, Relaxed);
        }
        out
    }

    /// Brings the flash-resident values of the next keys of a multiget into DRAM with one
    /// blocking task for all their reads (up to [`PREFETCH_KEYS`] records, read in address
    /// order), instead of one task per key; [`Store::get_resident`] then answers them. A record
    /// that changed meanwhile, or sits in the open log chunk, is left to the one-key path.
    pub async fn prefetch(self: &Arc<Self>, keys: &[&[u8]]) {
        let mut want: Vec<(usize, KeyHash, u64, usize)> = Vec::new();
        {
            let mut g = lock(&self.inner);
            for (i, key) in keys.iter().enumerate() {
                if want.len() == PREFETCH_KEYS {
                    break;
                }
                let kh = KeyHash::of(key);
                if let Found::Flash(pos, addr) = g.lookup(key, kh) {
                    if addr / g.geo.chunk_size == g.open_no {
                        continue;
                    }
                    let len = g.record_len_at(pos, addr);
                    want.push((i, kh, addr, len));
                }
            }
        }
        if want.is_empty() {
            return;
        }
        want.sort_unstable_by_key(|w| w.2);
        // The reads go out in a few blocking tasks at once (a device serves several reads
        // in parallel), each reading its share in address order.
        let spots: Vec<(u64, usize)> = want.iter().map(|w| (w.2, w.3)).collect();
        let per_task = spots.len().div_ceil(PREFETCH_TASKS);
        let mut tasks = Vec::with_capacity(PREFETCH_TASKS);
        for part in spots.chunks(per_task.max(1)) {
            let this = self.clone();
            let part = part.to_vec();
            tasks.push(tokio::task::spawn_blocking(move || {
                part.into_iter()
                    .map(|(addr, len)| this.read_record(addr, len))
                    .collect::<Vec<_>>()
            }));
        }
        let mut read = Vec::with_capacity(want.len());
        for t in tasks {
            match t.await {
                Ok(r) => read.extend(r),
                Err(_) => return,
            }
        }
        let now = now_unix();
        let mut g = lock(&self.inner);
        for ((i, kh, addr, _), bytes) in want.into_iter().zip(read) {
            let key = keys[i];
            let (Found::Flash(pos, a), Some(bytes)) = (g.lookup(key, kh), bytes) else {
                continue;
            };
            if a != addr {
                continue;
            }
            if let Some((_, slot)) = self.promote(&mut g, key, kh, pos, addr, &bytes, now) {
                g.dram[slot].bits |= FROM_FLASH;
            }
        }
    }

    /// mg with its item-changing flags: the value and what the meta flags report (`h`, `l`,
    /// `X`, `W`, `Z`), or `None` on a miss (and no vivify).
    pub async fn meta_get(self: &Arc<Self>, key: &[u8], req: MetaGet) -> Option<MetaItem> {
        self.counters.cmd_get.fetch_add(1, Relaxed);
        if req.touch.is_some() {
            self.counters.cmd_touch.fetch_add(1, Relaxed);
        }
        let kh = KeyHash::of(key);
        let out = self
            .with_current(key, |g, cur, now| {
                let (pos, slot, created) = match cur {
                    Some((pos, slot)) => (pos, slot, false),
                    None => {
                        // N: a miss creates an empty item with that TTL; this client wins.
                        let ttl = req.vivify?;
                        g.write_item(key, kh, 0, ttl, b"", req.new_cas, now).ok()?;
                        let pos = g.index.find(kh, key.len())?;
                        match g.loc(pos) {
                            Loc::Dram(slot) => (pos, slot as usize, true),
                            Loc::Flash(_) => return None,
                        }
                    }
                };
                let it = &g.dram[slot];
                // h and l report the item as it was before this request.
                let fetched = it.bits & FETCHED != 0;
                let idle = now.saturating_sub(it.atime);
                let token_before = it.bits & TOKEN != 0;
                let stale = it.bits & STALE != 0;
                let mut won = created;
                if let Some(exptime) = req.touch {
                    g.dram[slot].exptime = exptime;
                    g.rewrite_record(slot);
                }
                let it = &g.dram[slot];
                if let Some(before) = req.recache {
                    if !token_before && !created && it.exptime != 0 && it.exptime < before {
                        won = true;
                    }
                }
                if stale && !token_before {
                    won = true;
                }
                if won {
                    g.dram[slot].bits |= TOKEN;
                }
                if !req.no_bump && !created {
                    g.bump(pos, slot, now);
                }
                let item = g.item_out(slot);
                if req.touch.is_some_and(|e| expired(e, now)) {
                    g.remove_entry(pos);
                }
                Some(MetaItem {
                    item,
                    fetched,
                    idle,
                    stale,
                    token_sent: token_before,
                    won,
                })
            })
            .await;
        self.count_get(out.is_some(), req.touch.is_some());
        out
    }

    /// What `me` shows of an item (no LRU bump, not marked fetched): `None` on a miss.
    pub async fn debug_item(self: &Arc<Self>, key: &[u8]) -> Option<ItemDebug> {
        self.with_current(key, |g, cur, now| {
            let (_, slot) = cur?;
            let it = &g.dram[slot];
            Some(ItemDebug {
                exptime: it.exptime,
                idle: now.saturating_sub(it.atime),
                cas: it.cas,
                fetched: it.bits & FETCHED != 0,
                size: it.cost(),
            })
        })
        .await
    }

    /// md with its flags: `invalidate` (I) marks the item stale with a new cas (and the TTL
    /// `new_ttl`, T) instead of removing it; `remove_value` (x) replaces the value by an empty
    /// one with client flags `flags` (keeping the item); `cas` (C) must match; `new_cas` (E).
    pub async fn meta_delete(self: &Arc<Self>, key: &[u8], req: MetaDelete) -> DelRes {
        let kh = KeyHash::of(key);
        let res = self
            .with_current(key, |g, cur, now| {
                let Some((pos, slot)) = cur else {
                    return DelRes::NotFound;
                };
                if req.cas.is_some_and(|c| g.cas_differs(c, g.dram[slot].cas)) {
                    return DelRes::Exists;
                }
                if !req.invalidate && !req.remove_value {
                    g.append(flash::KIND_DELETE, 0, 0, 0, key, &[]);
                    g.remove_entry(pos);
                    return DelRes::Deleted;
                }
                let it = &g.dram[slot];
                let (old_cas, old_exp, old_bits) = (it.cas, it.exptime, it.bits);
                let exptime = match (req.invalidate, req.new_ttl) {
                    (true, Some(t)) => t,
                    (false, Some(t)) if req.remove_value => t,
                    _ => old_exp,
                };
                let (bits, cas) = if req.invalidate {
                    ((old_bits | STALE) & !TOKEN, req.new_cas)
                } else {
                    (0, req.new_cas.or(Some(old_cas)))
                };
                let value = if req.remove_value {
                    Vec::new()
                } else {
                    g.dram[slot].value().to_vec()
                };
                let flags = if req.remove_value {
                    req.flags
                } else {
                    g.dram[slot].flags
                };
                match g.write_item_with(key, kh, flags, exptime, &value, cas, now, bits) {
                    Ok(_) => DelRes::Deleted,
                    Err(NoRoom) => DelRes::NotFound,
                }
            })
            .await;
        let c = match res {
            DelRes::Deleted => &self.counters.delete_hits,
            _ => &self.counters.delete_misses,
        };
        c.fetch_add(1, Relaxed);
        res
    }

    /// set / add / replace / append / prepend / cas / ms.
    pub async fn store(self: &Arc<Self>, key: &[u8], req: StoreReq<'_>) -> StoreRes {
        let res = self.store_inner(key, req).await;
        match res {
            StoreRes::TooLarge => self.count_too_large(),
            StoreRes::OutOfMemory => {
                self.counters.store_no_memory.fetch_add(1, Relaxed);
            }
            _ => {}
        }
        res
    }

    /// A store refused for its size (`store_too_large`), also where the protocol refuses it
    /// before the value is read.
    pub fn count_too_large(&self) {
        self.counters.store_too_large.fetch_add(1, Relaxed);
    }

    async fn store_inner(self: &Arc<Self>, key: &[u8], req: StoreReq<'_>) -> StoreRes {
        self.counters.cmd_set.fetch_add(1, Relaxed);
        if req.value.len() > self.cfg.item_max {
            return StoreRes::TooLarge;
        }
        let kh = KeyHash::of(key);
        if req.mode == Mode::Set && req.cas.is_none() {
            // A plain set needs nothing from the current version: no flash read.
            let mut g = lock(&self.inner);
            let now = now_unix();
            return stored(
                g.write_item(key, kh, req.flags, req.exptime, req.value, req.new_cas, now),
                req.value.len(),
            );
        }
        let item_max = self.cfg.item_max;
        let res = self
            .with_current(key, |g, cur, now| {
                let Some((_pos, slot)) = cur else {
                    if let (Some(ttl), Mode::Append | Mode::Prepend) = (req.vivify, req.mode) {
                        return stored(
                            g.write_item(key, kh, req.flags, ttl, req.value, req.new_cas, now),
                            req.value.len(),
                        );
                    }
                    return match (req.cas, req.mode) {
                        (Some(_), _) => StoreRes::NotFound,
                        (None, Mode::Add | Mode::Set) => stored(
                            g.write_item(
                                key,
                                kh,
                                req.flags,
                                req.exptime,
                                req.value,
                                req.new_cas,
                                now,
                            ),
                            req.value.len(),
                        ),
                        _ => StoreRes::NotStored,
                    };
                };
                let mut bits = 0;
                if let Some(c) = req.cas {
                    let have = g.dram[slot].cas;
                    if g.cas_differs(c, have) {
                        // ms I: an older cas still stores, as a stale value with the old TTL.
                        if !(req.invalidate && c < have) {
                            return StoreRes::Exists;
                        }
                        bits = STALE | (g.dram[slot].bits & TOKEN);
                    }
                }
                if req.mode == Mode::Add {
                    g.bump(_pos, slot, now);
                    return StoreRes::NotStored;
                }
                let it = &g.dram[slot];
                let (flags, exptime, value): (u32, u32, std::borrow::Cow<[u8]>) = match req.mode {
                    Mode::Add => return StoreRes::NotStored,
                    Mode::Set | Mode::Replace => (req.flags, req.exptime, req.value.into()),
                    Mode::Append | Mode::Prepend => {
                        let old = it.value();
                        if old.len() + req.value.len() > item_max {
                            return StoreRes::TooLarge;
                        }
                        let mut v = Vec::with_capacity(old.len() + req.value.len());
                        if req.mode == Mode::Append {
                            v.extend_from_slice(old);
                            v.extend_from_slice(req.value);
                        } else {
                            v.extend_from_slice(req.value);
                            v.extend_from_slice(old);
                        }
                        (it.flags, it.exptime, v.into())
                    }
                };
                // A stale store keeps the item's TTL.
                let exptime = if bits & STALE != 0 {
                    it.exptime
                } else {
                    exptime
                };
                stored(
                    g.write_item_with(key, kh, flags, exptime, &value, req.new_cas, now, bits),
                    value.len(),
                )
            })
            .await;
        if req.cas.is_some() {
            let c = match res {
                StoreRes::Stored { .. } => &self.counters.cas_hits,
                StoreRes::Exists => &self.counters.cas_badval,
                _ => &self.counters.cas_misses,
            };
            c.fetch_add(1, Relaxed);
        }
        res
    }

    /// delete / md. `cas`: delete only if the current cas is this.
    pub async fn delete(self: &Arc<Self>, key: &[u8], cas: Option<u64>) -> DelRes {
        let res = self
            .with_current(key, |g, cur, _now| {
                let Some((pos, slot)) = cur else {
                    return DelRes::NotFound;
                };
                if cas.is_some_and(|c| g.cas_differs(c, g.dram[slot].cas)) {
                    return DelRes::Exists;
                }
                g.append(flash::KIND_DELETE, 0, 0, 0, key, &[]);
                g.remove_entry(pos);
                DelRes::Deleted
            })
            .await;
        let c = match res {
            DelRes::Deleted => &self.counters.delete_hits,
            _ => &self.counters.delete_misses,
        };
        c.fetch_add(1, Relaxed);
        res
    }

    /// touch: sets a new absolute expiry; whether the key was there.
    pub async fn touch(self: &Arc<Self>, key: &[u8], exptime: u32) -> bool {
        self.counters.cmd_touch.fetch_add(1, Relaxed);
        let hit = self
            .with_current(key, |g, cur, now| {
                let Some((pos, slot)) = cur else {
                    return false;
                };
                g.dram[slot].exptime = exptime;
                g.rewrite_record(slot);
                g.bump(pos, slot, now);
                if expired(exptime, now) {
                    g.remove_entry(pos);
                }
                true
            })
            .await;
        let c = if hit {
            &self.counters.touch_hits
        } else {
            &self.counters.touch_misses
        };
        c.fetch_add(1, Relaxed);
        hit
    }

    /// incr / decr / ma. `vivify`: on a miss create the item with (initial value, expiry).
    /// `ttl`: new expiry on success.
    pub async fn arith(
        self: &Arc<Self>,
        key: &[u8],
        incr: bool,
        delta: u64,
        cas: Option<u64>,
        vivify: Option<(u64, u32)>,
        ttl: Option<u32>,
    ) -> ArithRes {
        self.arith_with(key, incr, delta, cas, vivify, ttl, None)
            .await
    }

    /// [`Store::arith`] with the cas the changed item gets (`new_cas`, meta E).
    #[allow(clippy::too_many_arguments)]
    pub async fn arith_with(
        self: &Arc<Self>,
        key: &[u8],
        incr: bool,
        delta: u64,
        cas: Option<u64>,
        vivify: Option<(u64, u32)>,
        ttl: Option<u32>,
        new_cas: Option<u64>,
    ) -> ArithRes {
        let kh = KeyHash::of(key);
        let res = self
            .with_current(key, |g, cur, now| {
                let Some((_pos, slot)) = cur else {
                    if let Some((initial, exptime)) = vivify {
                        let v = initial.to_string();
                        let Ok(c) = g.write_item(key, kh, 0, exptime, v.as_bytes(), new_cas, now)
                        else {
                            return ArithRes::OutOfMemory;
                        };
                        return ArithRes::Value {
                            value: initial,
                            cas: c,
                            exptime,
                        };
                    }
                    return ArithRes::NotFound;
                };
                let it = &g.dram[slot];
                if cas.is_some_and(|c| g.cas_differs(c, it.cas)) {
                    return ArithRes::Exists;
                }
                let Some(cur_v) = parse_counter(it.value()) else {
                    return ArithRes::NonNumeric;
                };
                let v = if incr {
                    cur_v.wrapping_add(delta)
                } else {
                    cur_v.saturating_sub(delta)
                };
                let (flags, exptime) = (it.flags, ttl.unwrap_or(it.exptime));
                let new = v.to_string();
                let Ok(c) = g.write_item(key, kh, flags, exptime, new.as_bytes(), new_cas, now)
                else {
                    return ArithRes::OutOfMemory;
                };
                ArithRes::Value {
                    value: v,
                    cas: c,
                    exptime,
                }
            })
            .await;
        let (hits, misses) = if incr {
            (&self.counters.incr_hits, &self.counters.incr_misses)
        } else {
            (&self.counters.decr_hits, &self.counters.decr_misses)
        };
        match res {
            ArithRes::Value { .. } => hits.fetch_add(1, Relaxed),
            ArithRes::NotFound => misses.fetch_add(1, Relaxed),
            _ => 0,
        };
        res
    }

    /// flush_all: every item goes (a flush record makes it last across restarts).
    pub fn flush_all(&self) {
        let mut g = lock(&self.inner);
        g.append(flash::KIND_FLUSH, 0, 0, 0, &[], &[]);
        g.clear_all();
    }

    /// `flush_all` in `secs` seconds (now when 0), as memcached's `flush_all N` and the binary
    /// Flush with an expiry: a timer on the caller's runtime, not kept across a restart.
    ///
    /// `secs` follows memcached's time rule: up to 30 days it is a delay, beyond an absolute
    /// unix time (one already past flushes now). A later `flush_all` replaces a pending one, as
    /// in memcached (one flush time is kept).
    pub fn flush_all_after(self: &Arc<Self>, secs: u64) {
        let secs = if secs > 60 * 60 * 24 * 30 {
            secs.saturating_sub(u64::from(now_unix()))
        } else {
            secs
        };
        self.counters.cmd_flush.fetch_add(1, Relaxed);
        let generation = self.flush_generation.fetch_add(1, Relaxed) + 1;
        if secs == 0 {
            self.flush_all();
            return;
        }
        let s = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
            if s.flush_generation.load(Relaxed) == generation {
                s.flush_all();
            }
        });
    }

    /// Hands what the open chunk holds to the writer (the periodic "flush").
    pub fn flush_log(&self) {
        lock(&self.inner).flush_open();
    }

    /// Writes a checkpoint of the index (blocking: call from a blocking context).
    pub fn checkpoint(&self) -> Result<()> {
        let Some(ckpt_path) = &self.ckpt_path else {
            // DRAM only: nothing survives a restart, nothing to write.
            return Ok(());
        };
        let ckpt_err = |e: std::io::Error| CacheError::Checkpoint {
            path: ckpt_path.display().to_string(),
            source: e,
        };
        let (head, tail, cas, clock, geo, nbuckets) = {
            let mut g = lock(&self.inner);
            // DRAM items whose record was reclaimed get a fresh one, so the checkpoint can
            // point every entry at flash.
            let tail = g.tail;
            let now = now_unix();
            for slot in 0..g.dram.len() {
                if g.dram[slot].backing < tail && !expired(g.dram[slot].exptime, now) {
                    g.rewrite_record(slot);
                    g.rescued += 1;
                }
            }
            g.flush_open();
            (g.head, g.tail, g.cas, g.clock, g.geo, g.index.buckets.len())
        };
        // The index goes out a piece at a time, each copied under the lock (a pause of
        // microseconds, not one of the whole index) and written outside it; no second copy of
        // the index is ever held. A piece copied later may show entries newer than `head`:
        // replay from `head` applies those records again, in order, so recovery ends in the
        // same state. Their records are on the file before the checkpoint is (the log is
        // flushed and synced after the last piece).
        let mut w = recover::CheckpointWriter::create(
            ckpt_path,
            geo,
            nbuckets as u64,
            head,
            tail,
            cas,
            clock,
        )
        .map_err(ckpt_err)?;
        let mut piece: Vec<crate::index::Bucket> = Vec::with_capacity(CHECKPOINT_PIECE);
        for start in (0..nbuckets).step_by(CHECKPOINT_PIECE) {
            {
                let g = lock(&self.inner);
                piece.clear();
                let end = (start + CHECKPOINT_PIECE).min(nbuckets);
                piece.extend_from_slice(&g.index.buckets[start..end]);
                for b in piece.iter_mut() {
                    for e in b.e.iter_mut() {
                        if let (false, Loc::Dram(slot)) = (e.is_empty(), e.loc(g.head)) {
                            match g.dram.get(slot as usize) {
                                Some(it) if it.backing >= g.tail => {
                                    e.set_loc(Loc::Flash(it.backing));
                                    e.set_value_len(it.backing_len as usize);
                                }
                                _ => *e = Entry::default(),
                            }
                        }
                    }
                }
            }
            w.buckets(&piece).map_err(ckpt_err)?;
        }
        lock(&self.inner).flush_open();
        self.sync_log()?;
        w.commit().map_err(ckpt_err)?;
        self.counters.checkpoints.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Waits until everything handed to the writer is on the file (fdatasync).
    fn sync_log(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        let sender = lock(&self.inner).writer.clone();
        sender
            .send(Job::Sync(tx))
            .map_err(|_| CacheError::WriterStopped)?;
        match rx.recv() {
            Ok(r) => r.map_err(|e| CacheError::Flash {
                path: self
                    .cfg
                    .flash_path
                    .as_ref()
                    .map_or_else(String::new, |p| p.display().to_string()),
                source: e,
            }),
            Err(_) => Err(CacheError::WriterStopped),
        }
    }

    /// Clean shutdown: final checkpoint, writer stopped. Idempotent.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, Relaxed) {
            return Ok(());
        }
        let r = self.checkpoint();
        // Dropping every sender ends the writer: replace ours with a dead channel.
        {
            let mut g = lock(&self.inner);
            let (dead, _) = mpsc::sync_channel(1);
            g.writer = dead;
        }
        if let Some(h) = lock(&self.writer_thread).take() {
            let _ = h.join();
        }
        r
    }

    /// memcached-style statistics, in order.
    pub fn stats(&self) -> Vec<(&'static str, String)> {
        let c = &self.counters;
        let g = lock(&self.inner);
        let ld = |a: &AtomicU64| a.load(Relaxed).to_string();
        let up = self.started.elapsed();
        let flash_items = g.live.iter().map(|&n| n as u64).sum::<u64>();
        let index_bytes = g.index.bytes() as u64;
        let rusage = inpath_core::cpu_times();
        let mut v: Vec<(&'static str, String)> = vec![
            ("pid", std::process::id().to_string()),
            ("uptime", up.as_secs().to_string()),
            ("time", now_unix().to_string()),
            ("version", crate::types::VERSION.to_string()),
            (
                "pointer_size",
                (8 * std::mem::size_of::<usize>()).to_string(),
            ),
            ("rusage_user", format!("{:.6}", rusage.0)),
            ("rusage_system", format!("{:.6}", rusage.1)),
            ("curr_connections", ld(&c.curr_connections)),
            ("total_connections", ld(&c.total_connections)),
            ("rejected_connections", ld(&c.rejected_connections)),
            ("idle_kicks", ld(&c.idle_kicks)),
            ("cmd_get", ld(&c.cmd_get)),
            ("cmd_set", ld(&c.cmd_set)),
            ("cmd_flush", ld(&c.cmd_flush)),
            ("cmd_touch", ld(&c.cmd_touch)),
            ("get_hits", ld(&c.get_hits)),
            ("get_misses", ld(&c.get_misses)),
            ("get_expired", ld(&c.get_expired)),
            ("delete_misses", ld(&c.delete_misses)),
            ("delete_hits", ld(&c.delete_hits)),
            ("incr_misses", ld(&c.incr_misses)),
            ("incr_hits", ld(&c.incr_hits)),
            ("decr_misses", ld(&c.decr_misses)),
            ("decr_hits", ld(&c.decr_hits)),
            ("cas_misses", ld(&c.cas_misses)),
            ("cas_hits", ld(&c.cas_hits)),
            ("cas_badval", ld(&c.cas_badval)),
            ("touch_hits", ld(&c.touch_hits)),
            ("touch_misses", ld(&c.touch_misses)),
            ("bytes_read", ld(&c.bytes_read)),
            ("bytes_written", ld(&c.bytes_written)),
            ("limit_maxbytes", g.memory_limit.to_string()),
            ("threads", self.settings.threads.to_string()),
            ("bytes", g.item_bytes.to_string()),
            ("curr_items", g.curr_items.to_string()),
            ("total_items", g.total_items.to_string()),
            ("evictions", g.evictions.to_string()),
            ("reclaimed", g.reused.to_string()),
            ("flash_reclaimed_items", g.reclaimed_items.to_string()),
            ("store_too_large", ld(&c.store_too_large)),
            ("store_no_memory", ld(&c.store_no_memory)),
            ("conn_yields", ld(&c.conn_yields)),
            ("dram_items", g.dram.len().to_string()),
            ("dram_bytes", g.dram_bytes.to_string()),
            ("dram_limit_bytes", g.dram_budget.to_string()),
            ("dram_evictions", g.dram_evictions.to_string()),
            ("dram_hits", ld(&c.dram_hits)),
            ("flash_items", flash_items.to_string()),
            ("flash_hits", ld(&c.flash_hits)),
            ("flash_reads", ld(&c.flash_reads)),
            ("flash_read_bytes", ld(&c.flash_read_bytes)),
            ("flash_read_errors", ld(&c.flash_read_errors)),
            (
                "flash_writes",
                (g.flash_bytes_written / g.geo.chunk_size.max(1)).to_string(),
            ),
            ("flash_bytes_written", g.flash_bytes_written.to_string()),
            ("flash_write_errors", ld(&c.flash_write_errors)),
            (
                "flash_bytes",
                (g.head - g.tail)
                    .min(g.geo.chunk_size * g.geo.nchunks)
                    .to_string(),
            ),
            (
                "flash_limit_bytes",
                (g.geo.chunk_size * g.geo.nchunks).to_string(),
            ),
            ("flash_chunk_bytes", g.geo.chunk_size.to_string()),
            ("flash_chunks_reclaimed", g.reclaimed_chunks.to_string()),
            ("flash_direct_io", u8::from(self.flash_direct()).to_string()),
            ("log_buffer_hits", ld(&c.log_buffer_hits)),
            ("log_head", g.head.to_string()),
            ("log_tail", g.tail.to_string()),
            ("rescued_items", g.rescued.to_string()),
            ("index_bytes", index_bytes.to_string()),
            ("index_entries", g.index.entries().to_string()),
            ("index_tag_collisions", g.tag_collisions.to_string()),
            ("index_false_positives", ld(&c.index_false_positives)),
            ("damaged_records", ld(&c.damaged_records)),
            (
                "flash_sealed",
                g.seal.as_ref().map_or("none".into(), |h| h.0.describe()),
            ),
            ("seal_errors", g.seal_errors.to_string()),
            ("checkpoints", ld(&c.checkpoints)),
            ("recovered_items", self.recovery.items.to_string()),
        ];
        let per = if g.curr_items > 0 {
            format!("{:.2}", index_bytes as f64 / g.curr_items as f64)
        } else {
            "0".into()
        };
        v.push(("index_bytes_per_item", per));
        v.extend(self.access.stats());
        v
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A store's reply: stored with its cas, or no room with evictions off.
fn stored(r: std::result::Result<u64, NoRoom>, size: usize) -> StoreRes {
    match r {
        Ok(cas) => StoreRes::Stored { cas, size },
        Err(NoRoom) => StoreRes::OutOfMemory,
    }
}

fn parse_counter(v: &[u8]) -> Option<u64> {
    // memcached accepts trailing spaces (its own decr pads) and nothing else.
    let s = std::str::from_utf8(v).ok()?.trim_end_matches(' ');
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn writer_loop(
    rx: mpsc::Receiver<Job>,
    flash: Arc<FlashFile>,
    pending: Arc<Mutex<HashMap<u64, Arc<AlignedBuf>>>>,
    counters: Arc<Counters>,
    verbose: bool,
) {
    let mut warned = false;
    while let Ok(job) = rx.recv() {
        match job {
            Job::Write {
                offset,
                buf,
                from,
                to,
                pending: key,
            } => {
                if let Err(e) = flash.write_at(&buf.as_slice()[from..to], offset + from as u64) {
                    counters.flash_write_errors.fetch_add(1, Relaxed);
                    if verbose || !warned {
                        eprintln!("inpath cache: flash write at {}: {e}", offset + from as u64);
                        warned = true;
                    }
                }
                if let Some(k) = key {
                    lock(&pending).remove(&k);
                }
            }
            Job::Sync(ack) => {
                let _ = ack.send(flash.sync());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::LOG_WINDOW;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn req(value: &[u8]) -> StoreReq<'_> {
        StoreReq::new(Mode::Set, 0, 0, value, None)
    }

    /// An entry whose tag and length match `fake` but whose value belongs to `real` is a miss.
    #[test]
    fn tag_false_positives_are_misses_never_wrong_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StoreConfig::new(dir.path().join("f"));
        cfg.memory = 8 << 20;
        cfg.flash_size = 12 << 20;
        let store = Store::open(cfg).unwrap();
        block_on(async {
            for (real, fake, on_flash) in [("alpha", "bravo", true), ("gamma", "delta", false)] {
                store.store(real.as_bytes(), req(b"value")).await;
                // Seal the open chunk so a flash read really goes to the file.
                {
                    let mut g = lock(&store.inner);
                    let kh = KeyHash::of(real.as_bytes());
                    let pos = g.index.find(kh, real.len()).unwrap();
                    let Loc::Dram(slot) = g.loc(pos) else {
                        panic!()
                    };
                    if on_flash {
                        g.evict_to_flash(slot as usize, now_unix());
                        g.seal_open();
                    }
                    let e = *g.index.get(pos);
                    *g.index.get_mut(pos) = Entry::default();
                    let fk = KeyHash::of(fake.as_bytes());
                    let (fpos, alt) = g.index.victim(fk, 0, |_| false);
                    *g.index.get_mut(fpos) = Entry::new(e.loc(g.head), 5, fk.tag, 5, 0, alt);
                }
                store.sync_log().unwrap();
                let reads = store.counters.flash_reads.load(Relaxed);
                assert!(store.get(fake.as_bytes(), None).await.is_none());
                assert!(store.get(real.as_bytes(), None).await.is_none());
                let read = store.counters.flash_reads.load(Relaxed) - reads;
                assert_eq!(
                    read,
                    u64::from(on_flash),
                    "one read for the flash candidate"
                );
            }
            assert_eq!(store.counters.index_false_positives.load(Relaxed), 1);
        });
        store.close().unwrap();
    }

    /// An entry whose stored location names a live place of the log it was not written for
    /// (what a dead entry left a whole log window, 2 TiB, behind the head would read as) is a
    /// miss, never another key's value: at another record's start the keys differ, inside a
    /// record no intact record starts.
    #[test]
    fn aliased_locations_are_misses_never_wrong_values() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StoreConfig::new(dir.path().join("f"));
        cfg.memory = 8 << 20;
        cfg.flash_size = 12 << 20;
        let store = Store::open(cfg).unwrap();
        block_on(async {
            store.store(b"alpha", req(b"value-a")).await;
            store.store(b"bravo", req(b"value-b")).await;
            let pos = |g: &Inner, key: &[u8]| g.index.find(KeyHash::of(key), key.len()).unwrap();
            let bravo = {
                let mut g = lock(&store.inner);
                for key in [&b"alpha"[..], b"bravo"] {
                    let Loc::Dram(slot) = g.loc(pos(&g, key)) else {
                        panic!()
                    };
                    g.evict_to_flash(slot as usize, now_unix());
                }
                g.seal_open();
                let Loc::Flash(bravo) = g.loc(pos(&g, b"bravo")) else {
                    panic!()
                };
                // A record a window earlier is stored with the same bits.
                let a = pos(&g, b"alpha");
                g.index
                    .get_mut(a)
                    .set_loc(Loc::Flash(bravo + 3 * LOG_WINDOW));
                assert_eq!(g.loc(a), Loc::Flash(bravo));
                bravo
            };
            store.sync_log().unwrap();
            assert!(store.get(b"alpha", None).await.is_none());
            assert_eq!(store.counters.index_false_positives.load(Relaxed), 1);
            assert_eq!(store.get(b"bravo", None).await.unwrap().value, b"value-b");
            {
                let mut g = lock(&store.inner);
                let a = pos(&g, b"alpha");
                g.index.get_mut(a).set_loc(Loc::Flash(bravo + 8));
            }
            assert!(store.get(b"alpha", None).await.is_none());
            assert_eq!(store.counters.damaged_records.load(Relaxed), 1);
            assert!(lock(&store.inner)
                .index
                .find(KeyHash::of(b"alpha"), 5)
                .is_none());
            assert_eq!(store.get(b"bravo", None).await.unwrap().value, b"value-b");
            store.store(b"alpha", req(b"value-a2")).await;
            assert_eq!(store.get(b"alpha", None).await.unwrap().value, b"value-a2");
        });
        store.close().unwrap();
    }

    /// Each store reports the settings it was opened with: nothing is shared between stores
    /// (or servers) in one process.
    #[test]
    fn settings_belong_to_each_store() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str, settings: Settings| {
            let mut cfg = StoreConfig::new(dir.path().join(name));
            cfg.memory = 8 << 20;
            cfg.flash_size = 12 << 20;
            Store::open_with(cfg, settings).unwrap()
        };
        let a = open(
            "a",
            Settings {
                threads: 3,
                max_conns: 7,
                shutdown_command: false,
                idle_timeout_secs: 0,
                verbosity: 0,
                ..Settings::default()
            },
        );
        let b = open("b", Settings::default());
        let threads = |s: &Store| {
            s.stats()
                .into_iter()
                .find(|(k, _)| *k == "threads")
                .unwrap()
                .1
        };
        assert_eq!(threads(&a), "3");
        assert_eq!(threads(&b), "0");
        assert_eq!(a.settings().max_conns, 7);
        a.close().unwrap();
        b.close().unwrap();
    }
}
