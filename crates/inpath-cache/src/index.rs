//! The DRAM index: a set-associative hash table of 64-byte buckets, four 16-byte entries each
//! (BlueCache's KV-index cache, reference 001 §2.5).
//!
//! Entry (two little-endian u64 words, 128 bits):
//! - word 0: bits 0..48 location (DRAM slot number, or flash log address / 8), bit 48 "in DRAM",
//!   bits 49..57 key length (1..=250; 0 = empty entry), bits 57..64 tag bits 11..18;
//! - word 1: bits 0..32 last-access clock, bits 32..53 value length (saturated at 2^21-1),
//!   bits 53..64 tag bits 0..11.
//!
//! The tag (18 bits) comes from a second hash of the key; a lookup matches tag and key length,
//! then the caller confirms the full key against the one stored with the value. At most one
//! entry per (bucket, tag, key length) is kept, so a lookup has at most one candidate.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

const LOC_BITS: u32 = 48;
const LOC_MASK: u64 = (1 << LOC_BITS) - 1;
const DRAM_BIT: u64 = 1 << 48;
const TAG_SEED: u64 = 0x9E37_79B9_7F4A_7C15;
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
    pub fn new(loc: Loc, key_len: usize, tag: u32, value_len: usize, clock: u32) -> Entry {
        let (l, dram) = match loc {
            Loc::Dram(slot) => (slot, DRAM_BIT),
            Loc::Flash(addr) => (addr / 8, 0),
        };
        let tag = tag as u64 & 0x3FFFF;
        let w0 = (l & LOC_MASK) | dram | ((key_len as u64 & 0xFF) << 49) | ((tag >> 11) << 57);
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
        (((self.w0 >> 57) << 11) | (self.w1 >> 53)) as u32
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
            tag: (xxh3_64_with_seed(key, TAG_SEED) & 0x3FFFF) as u32,
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
    pub fn bucket_of(&self, h: u64) -> usize {
        ((h as u128 * self.buckets.len() as u128) >> 64) as usize
    }
    /// The entry matching this key's tag and length, if any.
    pub fn find(&self, kh: KeyHash, key_len: usize) -> Option<Pos> {
        let bucket = self.bucket_of(kh.h);
        let b = &self.buckets[bucket];
        (0..4)
            .find(|&way| {
                let e = &b.e[way];
                e.key_len() == key_len && e.tag() == kh.tag
            })
            .map(|way| Pos { bucket, way })
    }
    pub fn get(&self, pos: Pos) -> &Entry {
        &self.buckets[pos.bucket].e[pos.way]
    }
    pub fn get_mut(&mut self, pos: Pos) -> &mut Entry {
        &mut self.buckets[pos.bucket].e[pos.way]
    }
    /// The way to put a new key in: an empty (or `dead`) entry, else the least recently used one
    /// by clock age relative to `now` (the caller evicts what is there).
    pub fn victim_way(&self, bucket: usize, now: u32, dead: impl Fn(&Entry) -> bool) -> usize {
        let b = &self.buckets[bucket];
        if let Some(way) = (0..4).find(|&w| b.e[w].is_empty() || dead(&b.e[w])) {
            return way;
        }
        (0..4)
            .max_by_key(|&w| now.wrapping_sub(b.e[w].clock()))
            .unwrap_or(0)
    }
    /// The entry whose location is `loc` in the bucket of hash `h` (the backward pointer from a
    /// stored value to its index entry).
    pub fn find_loc(&self, h: u64, loc: Loc) -> Option<Pos> {
        let bucket = self.bucket_of(h);
        (0..4)
            .find(|&way| {
                let e = &self.buckets[bucket].e[way];
                !e.is_empty() && e.loc() == loc
            })
            .map(|way| Pos { bucket, way })
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
        let mut e = Entry::new(Loc::Flash(8 * 12345), 250, 0x3FFFF, 1 << 20, 77);
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(e.loc(), Loc::Flash(8 * 12345));
        assert_eq!(
            (e.key_len(), e.tag(), e.value_len(), e.clock()),
            (250, 0x3FFFF, 1 << 20, 77)
        );
        e.set_loc(Loc::Dram(9));
        e.set_clock(5);
        assert_eq!(
            (e.loc(), e.tag(), e.key_len(), e.clock()),
            (Loc::Dram(9), 0x3FFFF, 250, 5)
        );
        let e = Entry::new(Loc::Dram(3), 1, 0x155, 5 << 21, 1);
        assert_eq!((e.tag(), e.value_len()), (0x155, VLEN_MAX as usize));
    }

    #[test]
    fn full_bucket_picks_least_recently_used() {
        let mut idx = Index::new(1);
        for (way, clock) in [10u32, 3, 20, 7].iter().enumerate() {
            idx.buckets[0].e[way] = Entry::new(Loc::Dram(way as u64), 4, way as u32, 1, *clock);
        }
        assert_eq!(idx.victim_way(0, 25, |_| false), 1);
        // Clock wrap: ages are taken modulo 2^32.
        idx.buckets[0].e[1].set_clock(u32::MAX - 2);
        assert_eq!(idx.victim_way(0, 25, |_| false), 1);
        idx.buckets[0].e[1].set_clock(24);
        assert_eq!(idx.victim_way(0, 25, |_| false), 3);
        assert_eq!(idx.victim_way(0, 25, |e| e.tag() == 2), 2);
    }
}
