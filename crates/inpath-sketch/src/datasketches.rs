//! HyperLogLog images compatible with Apache DataSketches' HLL sketch: the binary that Spark's
//! `hll_sketch_agg` writes and `hll_union_agg` / `hll_sketch_estimate` read (Spark 3.5+), and
//! that the DataSketches libraries (Java, C++, Python) serialize and deserialize.
//!
//! inpath's own [`Sketch`](crate::Sketch) slices one XXH3 or MurmurHash3 hash for three
//! sketches and cannot be read by DataSketches. [`DsHll`] is a separate, plain HyperLogLog that
//! follows DataSketches' choices exactly, so its registers equal those of a DataSketches sketch
//! fed the same items:
//!
//! - hash: MurmurHash3_x64_128 with seed 9001 (DataSketches' `DEFAULT_UPDATE_SEED`) over the
//!   item's bytes: an integer as its 8 little-endian bytes (Java's `update(long)`; Spark widens
//!   ints and shorts to long), a string as its UTF-8 bytes (an empty string is ignored, as in
//!   DataSketches), a double as the bits of its canonical value (-0.0 as 0.0, every NaN as
//!   Java's canonical NaN);
//! - register (slot) = the low `lg_k` bits of the first hash word; value = the number of
//!   leading zeros of the second word plus one, at most 63 (the "coupon");
//! - `lg_k` from 4 to 21 (Spark's `lgConfigK`; its default is 12).
//!
//! Images are written as HLL_8 in HLL mode (40-byte preamble, one byte per register) with the
//! out-of-order flag set, so readers use DataSketches' composite estimator (the HIP accumulator
//! only holds for a sketch updated in order, not for merged states). Reading takes every form
//! DataSketches writes: LIST and SET (coupons, for small counts), and HLL_4 (with its
//! exception table), HLL_6 and HLL_8 arrays, compact or updatable. Merging keeps the larger
//! register; sketches of different `lg_k` merge at the smaller one, as DataSketches' union.
//!
//! [`DsHll::estimate`] uses Ertl's improved estimator over the registers (the same as inpath's
//! sketch): within the HyperLogLog error of DataSketches' composite estimate, not bit-equal.
//!
//! ```
//! use inpath_sketch::datasketches::DsHll;
//! let mut a = DsHll::new(12)?;
//! for i in 0..10_000u64 { a.update_u64(i); }
//! let image = a.to_bytes();
//! let b = DsHll::from_bytes(&image)?;
//! assert_eq!(a, b);
//! assert!((b.estimate() / 10_000.0 - 1.0).abs() < 0.05);
//! # Ok::<(), inpath_core::Error>(())
//! ```

use crate::hash::{murmur3_x64_128, murmur3_x64_128_small};
use inpath_core::{Error, Result};

/// DataSketches' default update seed.
pub const SEED: u32 = 9001;
/// The smallest `lg_k` DataSketches takes.
pub const MIN_LG_K: u8 = 4;
/// The largest `lg_k` DataSketches takes.
pub const MAX_LG_K: u8 = 21;
/// Spark's default `lgConfigK`.
pub const DEFAULT_LG_K: u8 = 12;

const FAMILY_ID: u8 = 7;
const SER_VER: u8 = 1;
const EMPTY_FLAG: u8 = 4;
const COMPACT_FLAG: u8 = 8;
const OUT_OF_ORDER_FLAG: u8 = 16;
const LIST_PREINTS: u8 = 2;
const SET_PREINTS: u8 = 3;
const HLL_PREINTS: u8 = 10;
const HLL_BYTE_ARR_START: usize = 40;
const KEY_MASK_26: u32 = (1 << 26) - 1;
const AUX_TOKEN: u8 = 15;
/// Java's canonical NaN (`Double.doubleToLongBits(Double.NaN)`).
const CANONICAL_NAN: u64 = 0x7ff8_0000_0000_0000;

/// A HyperLogLog sketch whose registers and images are DataSketches' (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DsHll {
    lg_k: u8,
    registers: Vec<u8>,
}

fn check_lg_k(lg_k: u8) -> Result<u8> {
    if (MIN_LG_K..=MAX_LG_K).contains(&lg_k) {
        Ok(lg_k)
    } else {
        Err(Error::parameter(
            "lg_k",
            lg_k,
            format!("{MIN_LG_K} to {MAX_LG_K} (DataSketches' range; Spark's default is 12)"),
        ))
    }
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::corrupt("a DataSketches HLL image", detail)
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl DsHll {
    /// An empty sketch of `2^lg_k` registers (`lg_k` 4 to 21).
    pub fn new(lg_k: u8) -> Result<DsHll> {
        Ok(DsHll {
            lg_k: check_lg_k(lg_k)?,
            registers: vec![0; 1 << lg_k],
        })
    }

    /// `lg_k`: log2 of the register count.
    pub fn lg_k(&self) -> u8 {
        self.lg_k
    }

    /// The registers (values 0 to 63).
    pub fn registers(&self) -> &[u8] {
        &self.registers
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.registers.iter().all(|&r| r == 0)
    }

    #[inline]
    fn add_hash(&mut self, (h1, h2): (u64, u64)) {
        let slot = (h1 as usize) & ((1 << self.lg_k) - 1);
        let value = (h2.leading_zeros().min(62) + 1) as u8;
        let r = &mut self.registers[slot];
        if value > *r {
            *r = value;
        }
    }

    /// Adds a 64-bit integer (Java's `update(long)`; also how Spark adds ints and shorts).
    #[inline]
    pub fn update_u64(&mut self, value: u64) {
        self.add_hash(murmur3_x64_128_small(value, 8, SEED));
    }

    /// Adds integers ([`DsHll::update_u64`] of each, sign-extended for `i64`).
    pub fn update_i64s(&mut self, values: &[i64]) {
        for &v in values {
            self.update_u64(v as u64);
        }
    }

    /// Adds a double: the bits of its canonical value (-0.0 as 0.0, NaN as Java's NaN).
    pub fn update_f64(&mut self, value: f64) {
        let bits = if value == 0.0 {
            0
        } else if value.is_nan() {
            CANONICAL_NAN
        } else {
            value.to_bits()
        };
        self.update_u64(bits);
    }

    /// Adds a byte string (an empty one is ignored, as DataSketches does).
    pub fn update_bytes(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.add_hash(murmur3_x64_128(bytes, SEED));
        }
    }

    /// Adds a string: its UTF-8 bytes (an empty string is ignored).
    pub fn update_str(&mut self, s: &str) {
        self.update_bytes(s.as_bytes());
    }

    /// Folds `other` in: the larger register wins. A sketch with a larger `lg_k` is folded
    /// down; with a smaller one, `self` is folded down to it first (DataSketches' union).
    pub fn merge(&mut self, other: &DsHll) {
        if other.lg_k < self.lg_k {
            *self = self.downsampled(other.lg_k);
        }
        let mask = (1usize << self.lg_k) - 1;
        if other.lg_k == self.lg_k {
            for (r, &o) in self.registers.iter_mut().zip(&other.registers) {
                *r = (*r).max(o);
            }
        } else {
            for (slot, &o) in other.registers.iter().enumerate() {
                let r = &mut self.registers[slot & mask];
                *r = (*r).max(o);
            }
        }
    }

    /// The same items at a smaller `lg_k` (a register's slot keeps its low bits).
    pub fn downsampled(&self, lg_k: u8) -> DsHll {
        let mut out = DsHll {
            lg_k,
            registers: vec![0; 1 << lg_k],
        };
        let mask = (1usize << lg_k) - 1;
        for (slot, &v) in self.registers.iter().enumerate() {
            let r = &mut out.registers[slot & mask];
            *r = (*r).max(v);
        }
        out
    }

    /// The cardinality estimate (Ertl's estimator over the registers, whose ranks run to 63).
    pub fn estimate(&self) -> f64 {
        crate::hll::estimate_ranks(&self.registers, 62)
    }

    /// The relative standard error of a merged sketch's estimate, 1.04 / sqrt(2^lg_k).
    pub fn standard_error(&self) -> f64 {
        1.04 / ((1u64 << self.lg_k) as f64).sqrt()
    }

    /// The DataSketches image: HLL_8 in HLL mode, out of order (an empty sketch: the 8-byte
    /// empty LIST image).
    pub fn to_bytes(&self) -> Vec<u8> {
        let k = 1usize << self.lg_k;
        if self.is_empty() {
            // preInts, serVer, family, lgK, lgArr, flags, count, mode (LIST, HLL_8)
            return vec![
                LIST_PREINTS,
                SER_VER,
                FAMILY_ID,
                self.lg_k,
                3,
                EMPTY_FLAG | COMPACT_FLAG,
                0,
                2 << 2,
            ];
        }
        let mut out = vec![0u8; HLL_BYTE_ARR_START + k];
        out[0] = HLL_PREINTS;
        out[1] = SER_VER;
        out[2] = FAMILY_ID;
        out[3] = self.lg_k;
        out[4] = 0;
        out[5] = OUT_OF_ORDER_FLAG;
        out[6] = 0; // curMin: HLL_8 keeps 0
        out[7] = 2 | (2 << 2); // HLL mode, HLL_8
        let (mut kxq0, mut kxq1, mut zeros) = (0f64, 0f64, 0u32);
        for &r in &self.registers {
            if r < 32 {
                kxq0 += 1.0 / (1u64 << r) as f64;
            } else {
                kxq1 += 1.0 / (1u64 << r) as f64;
            }
            zeros += (r == 0) as u32;
        }
        // The HIP accumulator is not valid for merged registers (the flag says so); written
        // as the estimate, for readers that show it anyway.
        out[8..16].copy_from_slice(&self.estimate().to_le_bytes());
        out[16..24].copy_from_slice(&kxq0.to_le_bytes());
        out[24..32].copy_from_slice(&kxq1.to_le_bytes());
        out[32..36].copy_from_slice(&zeros.to_le_bytes());
        out[36..40].copy_from_slice(&0u32.to_le_bytes());
        out[HLL_BYTE_ARR_START..].copy_from_slice(&self.registers);
        out
    }

    /// Reads any DataSketches HLL image: LIST, SET or HLL mode; HLL_4, HLL_6 or HLL_8;
    /// compact or updatable. Bad or truncated images are [`Error::Corrupt`] naming the field.
    pub fn from_bytes(bytes: &[u8]) -> Result<DsHll> {
        if bytes.len() < 8 {
            return Err(corrupt(format!(
                "{} bytes is shorter than the 8-byte preamble",
                bytes.len()
            )));
        }
        let (pre_ints, ser_ver, family, lg_k) = (bytes[0], bytes[1], bytes[2], bytes[3]);
        if family != FAMILY_ID {
            return Err(corrupt(format!(
                "family {family} is not HLL ({FAMILY_ID}); is it another DataSketches sketch?"
            )));
        }
        if ser_ver != SER_VER {
            return Err(corrupt(format!(
                "serialization version {ser_ver} is not {SER_VER}"
            )));
        }
        let lg_k = check_lg_k(lg_k).map_err(|_| {
            corrupt(format!(
                "lg_k {lg_k} is out of DataSketches' range {MIN_LG_K} to {MAX_LG_K}"
            ))
        })?;
        let mut out = DsHll::new(lg_k)?;
        let flags = bytes[5];
        let mode = bytes[7] & 3;
        let target = (bytes[7] >> 2) & 3;
        let compact = flags & COMPACT_FLAG != 0;
        if flags & EMPTY_FLAG != 0 {
            return Ok(out);
        }
        let coupons = |out: &mut DsHll, start: usize, n: usize| -> Result<()> {
            let end = start + 4 * n;
            if bytes.len() < end {
                return Err(corrupt(format!(
                    "{} bytes is too short for {n} coupons from byte {start}",
                    bytes.len()
                )));
            }
            let mask = (1u32 << lg_k) - 1;
            for i in 0..n {
                let c = le32(bytes, start + 4 * i);
                if c != 0 {
                    let slot = ((c & KEY_MASK_26) & mask) as usize;
                    let value = (c >> 26) as u8;
                    let r = &mut out.registers[slot];
                    *r = (*r).max(value);
                }
            }
            Ok(())
        };
        match (mode, pre_ints) {
            (0, LIST_PREINTS) => {
                let count = bytes[6] as usize;
                let n = if compact { count } else { 1 << bytes[4] };
                coupons(&mut out, 8, n)?;
            }
            (1, SET_PREINTS) => {
                if bytes.len() < 12 {
                    return Err(corrupt("a SET image shorter than its 12-byte preamble"));
                }
                let count = le32(bytes, 8) as usize;
                let n = if compact { count } else { 1 << bytes[4] };
                coupons(&mut out, 12, n)?;
            }
            (2, HLL_PREINTS) => {
                let k = 1usize << lg_k;
                let cur_min = bytes[6];
                let array = match target {
                    0 => k / 2,
                    1 => (k * 3 / 4) + 1,
                    2 => k,
                    t => {
                        return Err(corrupt(format!(
                            "HLL type {t} is not HLL_4, HLL_6 or HLL_8"
                        )))
                    }
                };
                let end = HLL_BYTE_ARR_START + array;
                if bytes.len() < end {
                    return Err(corrupt(format!(
                        "{} bytes is too short for the {array}-byte register array",
                        bytes.len()
                    )));
                }
                let arr = &bytes[HLL_BYTE_ARR_START..end];
                match target {
                    2 => out.registers.copy_from_slice(arr),
                    1 => {
                        for slot in 0..k {
                            let bit = slot * 6;
                            let two = arr[bit >> 3] as u16
                                | (arr.get((bit >> 3) + 1).copied().unwrap_or(0) as u16) << 8;
                            out.registers[slot] = ((two >> (bit & 7)) & 63) as u8;
                        }
                    }
                    _ => {
                        let mut exceptions = false;
                        for slot in 0..k {
                            let byte = arr[slot >> 1];
                            let nibble = if slot & 1 == 0 { byte & 15 } else { byte >> 4 };
                            if nibble == AUX_TOKEN {
                                exceptions = true;
                            } else {
                                out.registers[slot] = nibble + cur_min;
                            }
                        }
                        let aux_count = le32(bytes, 36) as usize;
                        if exceptions || aux_count > 0 {
                            let n = if compact { aux_count } else { 1 << bytes[4] };
                            coupons(&mut out, end, n)?;
                        }
                    }
                }
                if let Some(&bad) = out.registers.iter().find(|&&r| r > 63) {
                    return Err(corrupt(format!("a register holds {bad}, above 63")));
                }
            }
            (m, p) => {
                return Err(corrupt(format!(
                    "mode {m} with {p} preamble ints is not LIST (0, 2), SET (1, 3) or HLL (2, 10)"
                )))
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_merge_and_downsample() {
        let mut a = DsHll::new(11).unwrap();
        let mut b = DsHll::new(11).unwrap();
        let mut both = DsHll::new(11).unwrap();
        for i in 0..50_000u64 {
            if i % 3 == 0 {
                a.update_u64(i);
            } else {
                b.update_u64(i);
            }
            both.update_u64(i);
        }
        assert_eq!(DsHll::from_bytes(&a.to_bytes()).unwrap(), a);
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m, both);
        assert!((both.estimate() / 50_000.0 - 1.0).abs() < 3.0 * both.standard_error());
        // A larger lg_k merges at the smaller one.
        let mut big = DsHll::new(14).unwrap();
        for i in 0..50_000u64 {
            big.update_u64(i);
        }
        assert_eq!(big.downsampled(11), both);
        let mut small = both.clone();
        small.merge(&big);
        assert_eq!(small, both);
        let mut grown = big.clone();
        grown.merge(&both);
        assert_eq!(grown, both);
    }

    #[test]
    fn empty_and_bad_images() {
        let e = DsHll::new(12).unwrap();
        let image = e.to_bytes();
        assert_eq!(image.len(), 8);
        assert_eq!(DsHll::from_bytes(&image).unwrap(), e);
        assert!(DsHll::new(3).is_err() && DsHll::new(22).is_err());
        let mut a = DsHll::new(8).unwrap();
        a.update_str("x");
        let good = a.to_bytes();
        for (at, v, what) in [
            (2usize, 3u8, "family 3"),
            (1, 2, "serialization version 2"),
            (3, 30, "lg_k 30"),
            (7, 3, "mode 3"),
        ] {
            let mut bad = good.clone();
            bad[at] = v;
            let e = DsHll::from_bytes(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
        let e = DsHll::from_bytes(&good[..100]).unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
        assert!(DsHll::from_bytes(&good[..5]).is_err());
    }

    #[test]
    fn canonical_doubles_and_ignored_empties() {
        let mut a = DsHll::new(10).unwrap();
        let mut b = DsHll::new(10).unwrap();
        a.update_f64(0.0);
        b.update_f64(-0.0);
        a.update_f64(f64::NAN);
        b.update_f64(-f64::NAN);
        assert_eq!(a, b);
        let mut c = DsHll::new(10).unwrap();
        c.update_str("");
        c.update_bytes(b"");
        assert!(c.is_empty());
    }
}
