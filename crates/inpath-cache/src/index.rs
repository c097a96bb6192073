//! The DRAM index: a set-associative hash table of 64-byte buckets, five 12-byte entries each
//! (BlueCache's KV-index cache, reference 001 §2.5; the reference's entries are 16 bytes).
//!
//! Entry: 96 bits in three little-endian u32 words (bit i of the entry is bit i % 32 of word
//! i / 32); a bucket is five entries and 4 spare bytes (zero):
//! - bits 0..38: location: the DRAM slot number, or the flash log address / 8 modulo 2^38 (see
//!   "Locations" below);
//! - bit 38: "in DRAM"; bit 39: "in the key's second bucket";
//! - bits 40..48: key length (1..=250; 0 = empty entry);
//! - bits 48..64: tag (16 bits);
//! - bits 64..80: last-access clock / 256, modulo 2^16 (only compared as an age: which of a
//!   key's ten candidate entries was used least recently; it wraps every 2^24 clock ticks);
//! - bits 80..96: the record's payload length / 32, rounded down (payload = the value, or the
//!   sealed blob; at most 2^21 − 1 bytes). [`Entry::value_len`] answers the length rounded up
//!   to 32 bytes minus one: a read takes up to 31 bytes more than the record, in the same 4 KiB
//!   pages but for ~1 % of records (the caller clamps reads at the chunk's end).
//!
//! The tag comes from a second hash of the key; a lookup matches tag, key length and bucket
//! side (one 32-bit compare), then the caller confirms the full key against the one stored with
//! the value. At most one entry per (key's buckets, tag, key length) is kept, so a lookup has at
//! most one candidate. A lookup of an absent key meets about five entries of its buckets on the
//! matching side, so with 16 tag bits about 5 · load / 65536 of such lookups (~7e-5 when full)
//! find a candidate whose record then shows another key: one flash read, counted in
//! `index_false_positives`, a miss. The same odds apply to a new key landing on an existing
//! (buckets, tag, length): the older key is replaced.
//!
//! Locations. The log's virtual addresses grow forever, but every live record lies within the
//! flash size below the head, so an entry keeps only the address / 8 modulo 2^38
//! ([`LOG_WINDOW`] = 2 TiB) and [`Entry::loc`] takes the log head: the address is the latest one
//! below the head with those bits. That is exact while head − address < [`LOG_WINDOW`]. An
//! entry whose record was reclaimed (address below the log tail) is dead; dead entries are
//! cleared when a lookup meets them, when an insert reuses them and by [`Index::sweep`], which
//! the store runs each time it opens a chunk over 1 / nchunks of the table, so the whole table
//! every nchunks chunks. A dead entry is never moved (a cuckoo walk stops at it as free room),
//! so it is cleared at the latest nchunks chunks after it died: head − address stays below
//! (2 · nchunks + 2) · chunk size, which `Geometry` keeps within [`LOG_WINDOW`] (flash files up
//! to ~1 TiB). Should an entry alias anyway, its location is a place in the live log: the record
//! there carries its own address and key, which the store checks before serving, so an aliased
//! entry is a miss, never another value.
//!
//! Adaptation of the reference: each key has two candidate buckets (the second one derived from
//! the first and the tag, as in MemC3's partial-key cuckoo hashing, so an entry can be moved
//! without its key). A new key goes into the emptier bucket; when both are full, a short cuckoo
//! walk moves entries to their other bucket to make room; only when that fails is the least
//! recently used of the ten evicted. With one bucket per key, a table loaded to one key per
//! bucket already evicts ~0.4% of its keys on conflicts and ~20% when full; this keeps conflict
//! evictions under 1% at 95% load, at the price of a second cache line on misses.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Entries per bucket.
pub const WAYS: usize = 5;
/// Bytes of a bucket (five 12-byte entries and 4 spare bytes), in DRAM and in the checkpoint.
pub const BUCKET_BYTES: usize = 64;
/// Bytes of an entry.
pub const ENTRY_BYTES: usize = 12;
const LOC_BITS: u32 = 38;
const LOC_MASK: u64 = (1 << LOC_BITS) - 1;
/// The span of log addresses an entry's location tells apart: 2^38 × 8 bytes = 2 TiB.
pub const LOG_WINDOW: u64 = 8 << LOC_BITS;
/// Word 1: the location's top 6 bits, then these flags, key length (8 bits), tag (16 bits).
const LOC_HI_MASK: u32 = 0x3F;
const DRAM_BIT: u32 = 1 << 6;
const ALT_BIT: u32 = 1 << 7;
const TAG_SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// Bits of the tag.
pub const TAG_MASK: u32 = 0xFFFF;
/// The entry keeps the clock / 2^CLOCK_SHIFT in 16 bits.
const CLOCK_SHIFT: u32 = 8;
/// The entry keeps the payload length / 2^VLEN_SHIFT in 16 bits.
const VLEN_SHIFT: u32 = 5;
/// Steps of a cuckoo walk before giving up and evicting.
const CUCKOO_STEPS: usize = 64;
/// Longest payload an entry describes (longer ones are kept as this long).
pub const VLEN_MAX: u64 = (1 << 21) - 1;

/// Where an entry's value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Slot number in the DRAM store.
    Dram(u64),
    /// Virtual byte address of the record in the flash log (a multiple of 8).
    Flash(u64),
}

/// One index entry: 12 bytes (layout above).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Entry {
    pub w: [u32; 3],
}

/// Word 1 without the location bits and the DRAM flag: what a lookup compares.
fn match_word(key_len: usize, tag: u32, alt: bool) -> u32 {
    ((key_len as u32 & 0xFF) << 8) | ((tag & TAG_MASK) << 16) | if alt { ALT_BIT } else { 0 }
}

impl Entry {
    pub fn new(
        loc: Loc,
        key_len: usize,
        tag: u32,
        value_len: usize,
        clock: u32,
        alt: bool,
    ) -> Entry {
        let mut e = Entry {
            w: [0, match_word(key_len, tag, alt), 0],
        };
        e.set_loc(loc);
        e.set_value_len(value_len);
        e.set_clock(clock);
        e
    }
    pub fn is_empty(&self) -> bool {
        self.key_len() == 0
    }
    pub fn key_len(&self) -> usize {
        ((self.w[1] >> 8) & 0xFF) as usize
    }
    pub fn tag(&self) -> u32 {
        self.w[1] >> 16
    }
    /// Whether the entry sits in its key's second bucket.
    pub fn alt(&self) -> bool {
        self.w[1] & ALT_BIT != 0
    }
    fn flip_alt(&mut self) {
        self.w[1] ^= ALT_BIT;
    }
    /// Whether the value is in DRAM.
    pub fn in_dram(&self) -> bool {
        self.w[1] & DRAM_BIT != 0
    }
    fn matches(&self, key_len: usize, tag: u32, alt: bool) -> bool {
        self.w[1] & !(LOC_HI_MASK | DRAM_BIT) == match_word(key_len, tag, alt)
    }
    /// The 38 stored location bits.
    fn loc_bits(&self) -> u64 {
        self.w[0] as u64 | ((self.w[1] & LOC_HI_MASK) as u64) << 32
    }
    /// Where the value is. `head` is the log head (any address above the entry's record and
    /// less than [`LOG_WINDOW`] past it): a flash address is the latest one below `head` whose
    /// low bits the entry keeps.
    pub fn loc(&self, head: u64) -> Loc {
        let l = self.loc_bits();
        if self.in_dram() {
            return Loc::Dram(l);
        }
        let top = head.saturating_sub(1) >> 3;
        let back = top.wrapping_sub(l) & LOC_MASK;
        // Below address 0 only for an entry no log ever wrote: the chunk header at 0, a miss.
        Loc::Flash(top.checked_sub(back).map_or(0, |a| a << 3))
    }
    pub fn set_loc(&mut self, loc: Loc) {
        let (l, dram) = match loc {
            Loc::Dram(slot) => (slot & LOC_MASK, DRAM_BIT),
            Loc::Flash(addr) => ((addr >> 3) & LOC_MASK, 0),
        };
        self.w[0] = l as u32;
        self.w[1] = (self.w[1] & !(LOC_HI_MASK | DRAM_BIT)) | (l >> 32) as u32 | dram;
    }
    /// Whether the entry's stored location is `loc` (flash addresses modulo [`LOG_WINDOW`]).
    fn same_loc(&self, loc: Loc) -> bool {
        let mut other = *self;
        other.set_loc(loc);
        other.w[..2] == self.w[..2]
    }
    /// The record's payload length rounded up to a multiple of 32, minus one: at least the
    /// length, at most 31 bytes more (the entry keeps it / 32).
    pub fn value_len(&self) -> usize {
        (((self.w[2] >> 16) << VLEN_SHIFT) | ((1 << VLEN_SHIFT) - 1)) as usize
    }
    pub fn set_value_len(&mut self, len: usize) {
        let q = ((len as u64).min(VLEN_MAX) >> VLEN_SHIFT) as u32;
        self.w[2] = (self.w[2] & 0xFFFF) | (q << 16);
    }
    /// The last-access clock, to 2^8 ticks (its bits 8..24).
    pub fn clock(&self) -> u32 {
        (self.w[2] & 0xFFFF) << CLOCK_SHIFT
    }
    pub fn set_clock(&mut self, clock: u32) {
        self.w[2] = (self.w[2] & !0xFFFF) | ((clock >> CLOCK_SHIFT) & 0xFFFF);
    }
    /// Clock ticks / 2^8 since the last access, modulo 2^16.
    fn age(&self, now: u32) -> u16 {
        ((now >> CLOCK_SHIFT) as u16).wrapping_sub(self.w[2] as u16)
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct Bucket {
    pub e: [Entry; WAYS],
}

/// Hashes of a key: which bucket (first hash) and the tag (second hash).
#[derive(Clone, Copy, Debug)]
pub struct KeyHash {
    pub h: u64,
    pub tag: u32,
}

impl KeyHash {
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash {
            h: xxh3_64(key),
            tag: xxh3_64_with_seed(key, TAG_SEED) as u32 & TAG_MASK,
        }
    }
}

pub struct Index {
    pub buckets: Vec<Bucket>,
    /// Where the next [`Index::sweep`] starts.
    sweep_at: usize,
}

/// A position in the table: bucket and way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub bucket: usize,
    pub way: usize,
}

impl Index {
    pub fn new(nbuckets: usize) -> Index {
        Index {
            buckets: vec![Bucket::default(); nbuckets.max(1)],
            sweep_at: 0,
        }
    }
    /// [`Index::new`], or `None` when the memory cannot be had (instead of aborting).
    pub fn try_new(nbuckets: usize) -> Option<Index> {
        let n = nbuckets.max(1);
        let mut buckets = Vec::new();
        buckets.try_reserve_exact(n).ok()?;
        buckets.resize(n, Bucket::default());
        Some(Index {
            buckets,
            sweep_at: 0,
        })
    }
    /// Buckets holding `entries` entries.
    pub fn buckets_for(entries: u64) -> u64 {
        entries.div_ceil(WAYS as u64)
    }
    /// Whether a log of `nchunks` chunks of `chunk_size` bytes keeps every entry's address
    /// within [`LOG_WINDOW`] of the head: (2 · nchunks + 2) chunks (module documentation).
    pub fn log_fits(nchunks: u64, chunk_size: u64) -> bool {
        nchunks
            .saturating_mul(2)
            .saturating_add(2)
            .saturating_mul(chunk_size)
            <= LOG_WINDOW
    }
    pub fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }
    /// Entries the table holds.
    pub fn entries(&self) -> usize {
        self.buckets.len() * WAYS
    }
    fn offset(&self, tag: u32) -> usize {
        let n = self.buckets.len();
        if n < 2 {
            return 0;
        }
        1 + ((tag as u64).wrapping_mul(0x9E37_79B1) % (n as u64 - 1)) as usize
    }
    /// The key's two candidate buckets: one from its hash, the other from that and its tag.
    pub fn buckets_of(&self, kh: KeyHash) -> [usize; 2] {
        let n = self.buckets.len();
        let b1 = ((kh.h as u128 * n as u128) >> 64) as usize;
        [b1, (b1 + self.offset(kh.tag)) % n]
    }
    /// The other candidate bucket of the entry `e` sitting in `bucket`.
    fn other(&self, bucket: usize, e: &Entry) -> usize {
        let n = self.buckets.len();
        let off = self.offset(e.tag());
        if e.alt() {
            (bucket + n - off) % n
        } else {
            (bucket + off) % n
        }
    }
    /// The entry matching this key's tag and length, if any (two buckets, ten entries).
    pub fn find(&self, kh: KeyHash, key_len: usize) -> Option<Pos> {
        if key_len == 0 || key_len > 0xFF {
            return None;
        }
        for (i, bucket) in self.buckets_of(kh).into_iter().enumerate() {
            let b = &self.buckets[bucket];
            if let Some(way) = (0..WAYS).find(|&way| b.e[way].matches(key_len, kh.tag, i == 1)) {
                return Some(Pos { bucket, way });
            }
        }
        None
    }
    pub fn get(&self, pos: Pos) -> &Entry {
        &self.buckets[pos.bucket].e[pos.way]
    }
    pub fn get_mut(&mut self, pos: Pos) -> &mut Entry {
        &mut self.buckets[pos.bucket].e[pos.way]
    }
    fn free_way(&self, bucket: usize, dead: &impl Fn(&Entry) -> bool) -> Option<usize> {
        let b = &self.buckets[bucket];
        (0..WAYS).find(|&w| b.e[w].is_empty() || dead(&b.e[w]))
    }
    /// Where to put a new key, and whether that is its second bucket: a free (empty or `dead`)
    /// entry of the emptier bucket; else room made by a cuckoo walk; else the least recently
    /// used of the ten entries by clock age relative to `now` (the caller evicts what is
    /// there). Entries moved by the walk keep their contents; a walk never moves a `dead` one.
    pub fn victim(&mut self, kh: KeyHash, now: u32, dead: impl Fn(&Entry) -> bool) -> (Pos, bool) {
        let cands = self.buckets_of(kh);
        let nfree = |idx: &Index, bucket: usize| {
            let b = &idx.buckets[bucket];
            (0..WAYS)
                .filter(|&w| b.e[w].is_empty() || dead(&b.e[w]))
                .count()
        };
        let (f0, f1) = (nfree(self, cands[0]), nfree(self, cands[1]));
        if f0 > 0 || f1 > 0 {
            let i = usize::from(f1 > f0);
            if let Some(way) = self.free_way(cands[i], &dead) {
                return (
                    Pos {
                        bucket: cands[i],
                        way,
                    },
                    i == 1,
                );
            }
        }
        if cands[0] != cands[1] {
            // Cuckoo walk: find a chain of entries each movable to its other bucket, ending at
            // a free entry; then shift the chain and take its head. Every bucket on the chain
            // is full of live entries (a free or dead one would have ended it).
            let mut path: Vec<Pos> = Vec::with_capacity(CUCKOO_STEPS);
            let mut x = kh.h ^ now as u64;
            let mut bucket = cands[(x & 1) as usize];
            for _ in 0..CUCKOO_STEPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = Pos {
                    bucket,
                    way: (x >> 32) as usize % WAYS,
                };
                if path.contains(&pos) {
                    break;
                }
                path.push(pos);
                let ob = self.other(bucket, self.get(pos));
                if let Some(fw) = self.free_way(ob, &dead) {
                    let mut dst = Pos {
                        bucket: ob,
                        way: fw,
                    };
                    for &p in path.iter().rev() {
                        let mut e = *self.get(p);
                        e.flip_alt();
                        *self.get_mut(dst) = e;
                        dst = p;
                    }
                    *self.get_mut(dst) = Entry::default();
                    return (dst, dst.bucket != cands[0]);
                }
                bucket = ob;
            }
        }
        let mut best = (
            Pos {
                bucket: cands[0],
                way: 0,
            },
            false,
        );
        let mut best_age = 0;
        for (i, bucket) in cands.into_iter().enumerate() {
            for way in 0..WAYS {
                let age = self.buckets[bucket].e[way].age(now);
                if age >= best_age {
                    best_age = age;
                    best = (Pos { bucket, way }, i == 1);
                }
            }
        }
        best
    }
    /// The entry whose location is `loc` among the buckets of key hash `kh` (the backward
    /// pointer from a stored value to its index entry; flash addresses compare modulo
    /// [`LOG_WINDOW`]).
    pub fn find_loc(&self, kh: KeyHash, loc: Loc) -> Option<Pos> {
        for bucket in self.buckets_of(kh) {
            if let Some(way) = (0..WAYS).find(|&way| {
                let e = &self.buckets[bucket].e[way];
                !e.is_empty() && e.same_loc(loc)
            }) {
                return Some(Pos { bucket, way });
            }
        }
        None
    }
    /// Clears the dead flash entries (address below `tail`, read against `head`) of the next
    /// 1 / `nchunks` of the table, going on where the last call stopped. Run once per chunk
    /// the log opens, it passes over the whole table every `nchunks` chunks, before a dead
    /// entry's address could alias a live one (module documentation). Returns the entries
    /// cleared (dead entries are already uncounted by the store).
    pub fn sweep(&mut self, nchunks: u64, head: u64, tail: u64) -> usize {
        let n = self.buckets.len();
        let steps = n.div_ceil(usize::try_from(nchunks.max(1)).unwrap_or(usize::MAX));
        let mut cleared = 0;
        for _ in 0..steps {
            let at = self.sweep_at % n;
            for e in self.buckets[at].e.iter_mut() {
                if !e.is_empty() && matches!(e.loc(head), Loc::Flash(a) if a < tail) {
                    *e = Entry::default();
                    cleared += 1;
                }
            }
            self.sweep_at = (at + 1) % n;
        }
        cleared
    }
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_and_bucket_sizes() {
        assert_eq!(std::mem::size_of::<Entry>(), ENTRY_BYTES);
        assert_eq!(std::mem::size_of::<Bucket>(), BUCKET_BYTES);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
    }

    #[test]
    fn entry_fields_round_trip_at_their_extremes() {
        let head = 3 * LOG_WINDOW + (1 << 30) + 4096;
        // The oldest address the window tells apart, the newest, and one at the wrap of the
        // stored bits (stored location 0 and all ones).
        for addr in [
            head - LOG_WINDOW,
            head - 8,
            3 * LOG_WINDOW,
            3 * LOG_WINDOW - 8,
            head - 4096 - 8 * 12345,
        ] {
            let mut e = Entry::new(
                Loc::Flash(addr),
                250,
                TAG_MASK,
                VLEN_MAX as usize,
                77 << 8,
                true,
            );
            assert_eq!(e.loc(head), Loc::Flash(addr), "{addr}");
            assert_eq!(e.loc(addr + 8), Loc::Flash(addr), "head just past it");
            assert_eq!(
                e.loc(addr + LOG_WINDOW),
                Loc::Flash(addr),
                "window's far end"
            );
            // One window later the same bits name a newer address: what the sweep prevents.
            assert_eq!(e.loc(addr + LOG_WINDOW + 8), Loc::Flash(addr + LOG_WINDOW));
            assert_eq!(
                (
                    e.key_len(),
                    e.tag(),
                    e.value_len(),
                    e.clock(),
                    e.alt(),
                    e.in_dram()
                ),
                (250, TAG_MASK, VLEN_MAX as usize, 77 << 8, true, false)
            );
            e.set_loc(Loc::Dram((1 << 38) - 1));
            e.set_clock(u32::MAX);
            assert_eq!(
                (e.loc(head), e.tag(), e.key_len(), e.clock(), e.alt()),
                (Loc::Dram((1 << 38) - 1), TAG_MASK, 250, 0xFFFF << 8, true)
            );
            assert_eq!(e.value_len(), VLEN_MAX as usize);
            e.set_value_len(0);
            e.set_loc(Loc::Flash(addr));
            assert_eq!(
                (e.value_len(), e.loc(head), e.key_len()),
                (31, Loc::Flash(addr), 250)
            );
        }
        // Smallest fields, and no field bleeds into another.
        let e = Entry::new(Loc::Flash(0), 1, 0, 0, 0, false);
        assert_eq!(
            (
                e.loc(64),
                e.key_len(),
                e.tag(),
                e.value_len(),
                e.clock(),
                e.alt()
            ),
            (Loc::Flash(0), 1, 0, 31, 0, false)
        );
        assert!(!e.is_empty() && Entry::default().is_empty());
        // Value lengths: never under the length, at most 31 over; longer ones saturate.
        for len in [1usize, 31, 32, 1000, 1024, 1 << 20, VLEN_MAX as usize] {
            let e = Entry::new(Loc::Dram(3), 1, 0x155, len, 1, false);
            assert!(e.value_len() >= len && e.value_len() - len <= 31, "{len}");
        }
        let e = Entry::new(Loc::Dram(3), 1, 0x155, 5 << 21, 1, false);
        assert_eq!((e.tag(), e.value_len()), (0x155, VLEN_MAX as usize));
        // A location below the log's start (only in a damaged table) reads as address 0.
        assert_eq!(
            Entry::new(Loc::Flash(LOG_WINDOW - 8), 4, 1, 1, 1, false).loc(64),
            Loc::Flash(0)
        );
    }

    fn fill(idx: &mut Index, n: u64) -> u64 {
        let mut evicted = 0;
        for i in 0..n {
            let kh = KeyHash::of(format!("key{i}").as_bytes());
            let (pos, alt) = idx.victim(kh, (i as u32) << 8, |_| false);
            if !idx.get(pos).is_empty() {
                evicted += 1;
            }
            *idx.get_mut(pos) = Entry::new(Loc::Dram(i), 6, kh.tag, 1, (i as u32) << 8, alt);
        }
        evicted
    }

    #[test]
    fn cuckoo_moves_keep_every_key_findable_and_conflicts_rare() {
        let mut idx = Index::new(3072);
        assert_eq!(fill(&mut idx, 7500), 0, "half full: no conflicts");
        let n = idx.entries() as u64 * 95 / 100;
        let mut idx = Index::new(3072);
        let evicted = fill(&mut idx, n);
        assert!(
            evicted < n / 100,
            "{evicted} conflict evictions at 95% load"
        );
        // Every entry still in the table is where its key looks for it.
        let mut found = 0;
        for i in 0..n {
            let kh = KeyHash::of(format!("key{i}").as_bytes());
            if let Some(pos) = idx.find_loc(kh, Loc::Dram(i)) {
                assert_eq!(idx.find(kh, 6), Some(pos), "key{i} moved out of reach");
                found += 1;
            }
        }
        assert_eq!(found + evicted, n);
    }

    #[test]
    fn full_buckets_give_up_their_least_recently_used_entry() {
        // Two buckets: every key's candidates are bucket 0 and 1, so no walk can help.
        let mut idx = Index::new(2);
        let kh = KeyHash { h: 0, tag: 6 };
        let cands = idx.buckets_of(kh);
        assert_eq!(cands, [0, 1]);
        let clocks = [10u32, 3, 20, 7, 30, 12, 9, 15, 11, 13];
        for (i, clock) in clocks.iter().enumerate() {
            idx.buckets[i / WAYS].e[i % WAYS] =
                Entry::new(Loc::Dram(i as u64), 4, i as u32, 1, clock << 8, i >= WAYS);
        }
        let now = 40 << 8;
        assert_eq!(idx.victim(kh, now, |_| false).0, Pos { bucket: 0, way: 1 });
        idx.buckets[0].e[1].set_clock(u32::MAX - (2 << 8));
        assert_eq!(
            idx.victim(kh, now, |_| false).0,
            Pos { bucket: 0, way: 1 },
            "clock wraps"
        );
        idx.buckets[0].e[1].set_clock(39 << 8);
        assert_eq!(idx.victim(kh, now, |_| false).0, Pos { bucket: 0, way: 3 });
        assert_eq!(
            idx.victim(kh, now, |e| e.tag() == 6),
            (Pos { bucket: 1, way: 1 }, true)
        );
        assert_eq!(idx.find(kh, 4), Some(Pos { bucket: 1, way: 1 }));
        assert_eq!(idx.find(kh, 5), None);
        assert_eq!(idx.find(kh, 0), None, "no key is empty");
    }

    /// A log simulated against the table (keys set at random from a key space twice the
    /// table, so many are never set again; the tail moving a chunk at a time; dead entries
    /// reused by inserts): with the sweep every entry stays within (2 · nchunks + 2) chunks of
    /// the head, the bound the location window is sized by; without it entries fall behind.
    #[test]
    fn sweep_keeps_every_entry_within_the_bound() {
        let (nchunks, cs, rec) = (8u64, 64u64 << 10, 1024u64);
        let run = |sweep: bool| -> u64 {
            let mut idx = Index::new(64);
            let (mut head, mut tail, mut no, mut worst) = (64u64, 0u64, 0u64, 0u64);
            let mut x = 0x1234_5678_9ABC_DEF1u64;
            for i in 0..40_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let kh = KeyHash::of(format!("key{}", x % 640).as_bytes());
                if head + rec > (no + 1) * cs {
                    no += 1;
                    head = no * cs + 64;
                    tail = tail.max((no + 1).saturating_sub(nchunks) * cs);
                    if sweep {
                        idx.sweep(nchunks, head, tail);
                    }
                }
                let (pos, alt) = match idx.find(kh, 6) {
                    Some(p) => (p, idx.get(p).alt()),
                    None => idx.victim(
                        kh,
                        i << 8,
                        |e| matches!(e.loc(head), Loc::Flash(a) if a < tail),
                    ),
                };
                *idx.get_mut(pos) = Entry::new(Loc::Flash(head), 6, kh.tag, 1000, i << 8, alt);
                head += rec;
                for b in &idx.buckets {
                    for e in b.e.iter().filter(|e| !e.is_empty()) {
                        if let Loc::Flash(a) = e.loc(head) {
                            worst = worst.max(head - a);
                        }
                    }
                }
            }
            worst
        };
        let bound = (2 * nchunks + 2) * cs;
        assert!(run(true) <= bound, "{} > {bound}", run(true));
        assert!(
            run(false) > bound,
            "without the sweep the bound is not reached"
        );
    }

    /// The sweep clears every dead flash entry within `nchunks` calls and nothing else.
    #[test]
    fn sweep_clears_dead_entries_within_one_pass() {
        let nchunks = 7;
        let mut idx = Index::new(100);
        let (head, tail) = (10 * LOG_WINDOW, 10 * LOG_WINDOW - (1 << 30));
        for b in 0..100 {
            idx.buckets[b].e[0] =
                Entry::new(Loc::Flash(tail - 8 * b as u64 - 8), 4, 1, 1, 1, false);
            idx.buckets[b].e[1] = Entry::new(Loc::Flash(tail + 8 * b as u64), 4, 2, 1, 1, false);
            idx.buckets[b].e[2] = Entry::new(Loc::Dram(b as u64), 4, 3, 1, 1, false);
        }
        let cleared: usize = (0..nchunks).map(|_| idx.sweep(nchunks, head, tail)).sum();
        assert_eq!(cleared, 100);
        for (i, b) in idx.buckets.iter().enumerate() {
            assert!(b.e[0].is_empty());
            assert_eq!(b.e[1].loc(head), Loc::Flash(tail + 8 * i as u64));
            assert_eq!(b.e[2].loc(head), Loc::Dram(i as u64));
        }
    }
}
