//! Shared test helpers: a deliberately simple model of the sketch written from the slicing rules,
//! and data generators.
#![allow(dead_code)]

use inpath_sketch::hash::{extension_block, murmur3_x64_128};
use inpath_sketch::{HashMode, Params, Sketch};
use rand::{Rng, SeedableRng};

/// The sketch state computed one item at a time with 128-bit integers, straight from the rules:
/// bucket = top P bits of h; rank = clz((h << P) | (2^P − 1)) + 1; Count-Min row j = bits
/// jP..jP+P−1 from the least-significant end; Fast-AGMS row j = P+1 bits from j(P+1), low P bits
/// the index, bit P the sign (+1 set, −1 clear). Rows past 128 bits (fast mode only) take the
/// same rule inside derived blocks of ⌊128/P⌋ rows.
pub struct Model {
    pub p: Params,
    pub hll: Vec<u8>,
    pub cm: Vec<i64>,
    pub agms: Vec<i64>,
    pub count: u64,
}

impl Model {
    pub fn new(p: Params) -> Self {
        Model {
            p,
            hll: vec![0; 1 << p.hll_p],
            cm: vec![0; (p.cm_rows as usize) << p.cm_p],
            agms: vec![0; (p.agms_rows as usize) << p.agms_p],
            count: 0,
        }
    }

    /// The 128-bit hash of an item's bytes.
    pub fn hash(&self, bytes: &[u8]) -> u128 {
        match self.p.hash {
            HashMode::Compat => {
                let (h1, h2) = murmur3_x64_128(bytes, self.p.seed as u32);
                ((h2 as u128) << 64) | h1 as u128
            }
            HashMode::Fast => xxhash_rust::xxh3::xxh3_128_with_seed(bytes, self.p.seed),
        }
    }

    fn block(h: u128, k: u32) -> u128 {
        if k == 0 {
            return h;
        }
        let (lo, hi) = extension_block((h as u64, (h >> 64) as u64), k as u64);
        ((hi as u128) << 64) | lo as u128
    }

    pub fn insert(&mut self, bytes: &[u8]) {
        let h = self.hash(bytes);
        let p = self.p.hll_p as u32;
        let bucket = (h >> (128 - p)) as usize;
        let rank = (((h << p) | ((1u128 << p) - 1)).leading_zeros() + 1) as u8;
        self.hll[bucket] = self.hll[bucket].max(rank);

        let (rows, p) = (self.p.cm_rows as u32, self.p.cm_p as u32);
        let per_block = 128 / p;
        for j in 0..rows {
            let word = Self::block(h, j / per_block) >> ((j % per_block) * p);
            let index = (word & ((1u128 << p) - 1)) as usize;
            self.cm[((j as usize) << p) + index] += 1;
        }
        let (rows, p) = (self.p.agms_rows as u32, self.p.agms_p as u32);
        let per_block = 128 / (p + 1);
        for j in 0..rows {
            let word = Self::block(h, j / per_block) >> ((j % per_block) * (p + 1));
            let index = (word & ((1u128 << p) - 1)) as usize;
            let sign = if (word >> p) & 1 == 1 { 1 } else { -1 };
            self.agms[((j as usize) << p) + index] += sign;
        }
        self.count += 1;
    }

    /// Asserts that `sketch` holds exactly this state.
    pub fn assert_matches(&self, sketch: &Sketch, context: &str) {
        assert_eq!(sketch.count(), self.count, "{context}: count");
        assert_eq!(
            sketch.hll_registers(),
            &self.hll[..],
            "{context}: HLL registers"
        );
        let cm: Vec<i64> = sketch.cm_counters().iter().map(|&c| c as i64).collect();
        assert_eq!(cm, self.cm, "{context}: Count-Min counters");
        assert_eq!(
            sketch.agms_counters(),
            self.agms,
            "{context}: Fast-AGMS counters"
        );
    }
}

pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `n` random u32 items drawn from `0..universe` (repeats when the universe is small).
pub fn u32_items(seed: u64, n: usize, universe: u32) -> Vec<u32> {
    let mut rng = rng(seed);
    (0..n).map(|_| rng.gen_range(0..universe)).collect()
}

pub fn le_bytes(items: &[u32]) -> Vec<u8> {
    items.iter().flat_map(|v| v.to_le_bytes()).collect()
}
