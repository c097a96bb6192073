//! The DRAM index: a set-associative hash table of 64-byte buckets, four 16-byte entries each
//! (BlueCache's KV-index cache, reference 001 §2.5).
//!
//! Entry (two little-endian u64 words, 128 bits):
//! - word 0: bits 0..48 location (DRAM slot number, or flash log address / 8), bit 48 "in DRAM",
//!   bits 49..57 key length (1..=250; 0 = empty entry), bits 57..63 tag bits 11..17, bit 63
//!   "in the key's second bucket";
//! - word 1: bits 0..32 last-access clock, bits 32..53 value length (saturated at 2^21-1),
//!   bits 53..64 tag bits 0..11.
//!
//! The tag (17 bits) comes from a second hash of the key; a lookup matches tag and key length,
//! then the caller confirms the full key against the one stored with the value. At most one
//! entry per (key's buckets, tag, key length) is kept, so a lookup has at most one candidate.
//!
//! Adaptation of the reference: each key has two candidate buckets (the second one derived from
//! the first and the tag, as in MemC3's partial-key cuckoo hashing, so an entry can be moved
//! without its key). A new key goes into the emptier bucket; when both are full, a short cuckoo
//! walk moves entries to their other bucket to make room; only when that fails is the least
//! recently used of the eight evicted. With one bucket per key, a table loaded to one key per
//! bucket already evicts ~0.4% of its keys on conflicts and ~20% when full; this keeps conflict
//! evictions under 1% at 95% load, at the price of a second cache line on misses.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

const LOC_BITS: u32 = 48;
const LOC_MASK: u64 = (1 << LOC_BITS) - 1;
const DRAM_BIT: u64 = 1 << 48;
const TAG_SEED: u64 = 0x9E37_79B9_7F4A_7C15;
const TAG_MASK: u32 = (1 << 17) - 1;
/// Steps of a cuckoo walk before giving up and evicting.
const CUCKOO_STEPS: usize = 64;
pub const VLEN_MAX: u64 = (1 << 21) - 1;

/// Where an entry's value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Slot number in the DRAM store.
    Dram(u64),
    /// Virtual byte address of the record in the flash log.
    Flash(u64),
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Entry {
    pub w0: u64,
    pub w1: u64,
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
        let (l, dram) = match loc {
            Loc::Dram(slot) => (slot, DRAM_BIT),
            Loc::Flash(addr) => (addr / 8, 0),
        };
        let tag = tag as u64 & TAG_MASK as u64;
        let w0 = (l & LOC_MASK)
            | dram
            | ((key_len as u64 & 0xFF) << 49)
            | ((tag >> 11) << 57)
            | (u64::from(alt) << 63);
        let vlen = (value_len as u64).min(VLEN_MAX);
        let w1 = clock as u64 | (vlen << 32) | ((tag & 0x7FF) << 53);
        Entry { w0, w1 }
    }
    pub fn is_empty(&self) -> bool {
        self.key_len() == 0
    }
    pub fn key_len(&self) -> usize {
        ((self.w0 >> 49) & 0xFF) as usize
    }
    pub fn tag(&self) -> u32 {
        ((((self.w0 >> 57) & 0x3F) << 11) | (self.w1 >> 53)) as u32
    }
    /// Whether the entry sits in its key's second bucket.
    pub fn alt(&self) -> bool {
        self.w0 >> 63 != 0
    }
    fn flip_alt(&mut self) {
        self.w0 ^= 1 << 63;
    }
    pub fn loc(&self) -> Loc {
        let l = self.w0 & LOC_MASK;
        if self.w0 & DRAM_BIT != 0 {
            Loc::Dram(l)
        } else {
            Loc::Flash(l * 8)
        }
    }
    pub fn set_loc(&mut self, loc: Loc) {
        let (l, dram) = match loc {
            Loc::Dram(slot) => (slot, DRAM_BIT),
            Loc::Flash(addr) => (addr / 8, 0),
        };
        self.w0 = (self.w0 & !(LOC_MASK | DRAM_BIT)) | (l & LOC_MASK) | dram;
    }
    pub fn value_len(&self) -> usize {
        ((self.w1 >> 32) & VLEN_MAX) as usize
    }
    pub fn set_value_len(&mut self, len: usize) {
        let vlen = (len as u64).min(VLEN_MAX);
        self.w1 = (self.w1 & !(VLEN_MAX << 32)) | (vlen << 32);
    }
    pub fn clock(&self) -> u32 {
        self.w1 as u32
    }
    pub fn set_clock(&mut self, clock: u32) {
        self.w1 = (self.w1 & !0xFFFF_FFFF) | clock as u64;
    }
}

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct Bucket {
    pub e: [Entry; 4],
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
        }
    }
    pub fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
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
    /// The entry matching this key's tag and length, if any (two buckets, eight entries).
    pub fn find(&self, kh: KeyHash, key_len: usize) -> Option<Pos> {
        for (i, bucket) in self.buckets_of(kh).into_iter().enumerate() {
            let b = &self.buckets[bucket];
            if let Some(way) = (0..4).find(|&way| {
                let e = &b.e[way];
                e.key_len() == key_len && e.tag() == kh.tag && e.alt() == (i == 1)
            }) {
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
        (0..4).find(|&w| b.e[w].is_empty() || dead(&b.e[w]))
    }
    /// Where to put a new key, and whether that is its second bucket: a free (empty or `dead`)
    /// entry of the emptier bucket; else room made by a cuckoo walk; else the least recently
    /// used of the eight entries by clock age relative to `now` (the caller evicts what is
    /// there). Entries moved by the walk keep their contents.
    pub fn victim(&mut self, kh: KeyHash, now: u32, dead: impl Fn(&Entry) -> bool) -> (Pos, bool) {
        let cands = self.buckets_of(kh);
        let nfree = |idx: &Index, bucket: usize| {
            let b = &idx.buckets[bucket];
            (0..4)
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
            // a free entry; then shift the chain and take its head.
            let mut path: Vec<Pos> = Vec::with_capacity(CUCKOO_STEPS);
            let mut x = kh.h ^ now as u64;
            let mut bucket = cands[(x & 1) as usize];
            for _ in 0..CUCKOO_STEPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = Pos {
                    bucket,
                    way: (x >> 32) as usize % 4,
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
            for way in 0..4 {
                let age = now.wrapping_sub(self.buckets[bucket].e[way].clock());
                if age >= best_age {
                    best_age = age;
                    best = (Pos { bucket, way }, i == 1);
                }
            }
        }
        best
    }
    /// The entry whose location is `loc` among the buckets of key hash `kh` (the backward
    /// pointer from a stored value to its index entry).
    pub fn find_loc(&self, kh: KeyHash, loc: Loc) -> Option<Pos> {
        for bucket in self.buckets_of(kh) {
            if let Some(way) = (0..4).find(|&way| {
                let e = &self.buckets[bucket].e[way];
                !e.is_empty() && e.loc() == loc
            }) {
                return Some(Pos { bucket, way });
            }
        }
        None
    }
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_fields_round_trip() {
        let mut e = Entry::new(Loc::Flash(8 * 12345), 250, TAG_MASK, 1 << 20, 77, true);
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(e.loc(), Loc::Flash(8 * 12345));
        assert_eq!(
            (e.key_len(), e.tag(), e.value_len(), e.clock(), e.alt()),
            (250, TAG_MASK, 1 << 20, 77, true)
        );
        e.set_loc(Loc::Dram(9));
        e.set_clock(5);
        assert_eq!(
            (e.loc(), e.tag(), e.key_len(), e.clock()),
            (Loc::Dram(9), TAG_MASK, 250, 5)
        );
        let e = Entry::new(Loc::Dram(3), 1, 0x155, 5 << 21, 1, false);
        assert_eq!(
            (e.tag(), e.value_len(), e.alt()),
            (0x155, VLEN_MAX as usize, false)
        );
    }

    fn fill(idx: &mut Index, n: u64) -> u64 {
        let mut evicted = 0;
        for i in 0..n {
            let kh = KeyHash::of(format!("key{i}").as_bytes());
            let (pos, alt) = idx.victim(kh, i as u32, |_| false);
            if !idx.get(pos).is_empty() {
                evicted += 1;
            }
            *idx.get_mut(pos) = Entry::new(Loc::Dram(i), 6, kh.tag, 1, i as u32, alt);
        }
        evicted
    }

    #[test]
    fn cuckoo_moves_keep_every_key_findable_and_conflicts_rare() {
        let mut idx = Index::new(3072);
        assert_eq!(fill(&mut idx, 6000), 0, "half full: no conflicts");
        let mut idx = Index::new(3072);
        let evicted = fill(&mut idx, 11_673);
        assert!(evicted < 117, "{evicted} conflict evictions at 95% load");
        // Every entry still in the table is where its key looks for it.
        let mut found = 0;
        for i in 0..11_673u64 {
            let kh = KeyHash::of(format!("key{i}").as_bytes());
            if let Some(pos) = idx.find_loc(kh, Loc::Dram(i)) {
                assert_eq!(idx.find(kh, 6), Some(pos), "key{i} moved out of reach");
                found += 1;
            }
        }
        assert_eq!(found + evicted, 11_673);
    }

    #[test]
    fn full_buckets_give_up_their_least_recently_used_entry() {
        // Two buckets: every key's candidates are bucket 0 and 1, so no walk can help.
        let mut idx = Index::new(2);
        let kh = KeyHash { h: 0, tag: 6 };
        let cands = idx.buckets_of(kh);
        assert_eq!(cands, [0, 1]);
        let clocks = [10u32, 3, 20, 7, 30, 12, 9, 15];
        for (i, clock) in clocks.iter().enumerate() {
            idx.buckets[i / 4].e[i % 4] =
                Entry::new(Loc::Dram(i as u64), 4, i as u32, 1, *clock, i >= 4);
        }
        assert_eq!(idx.victim(kh, 40, |_| false).0, Pos { bucket: 0, way: 1 });
        idx.buckets[0].e[1].set_clock(u32::MAX - 2);
        assert_eq!(
            idx.victim(kh, 40, |_| false).0,
            Pos { bucket: 0, way: 1 },
            "clock wraps"
        );
        idx.buckets[0].e[1].set_clock(39);
        assert_eq!(idx.victim(kh, 40, |_| false).0, Pos { bucket: 0, way: 3 });
        assert_eq!(
            idx.victim(kh, 40, |e| e.tag() == 6),
            (Pos { bucket: 1, way: 2 }, true)
        );
        assert_eq!(idx.find(kh, 4), Some(Pos { bucket: 1, way: 2 }));
        assert_eq!(idx.find(kh, 5), None);
    }
}
