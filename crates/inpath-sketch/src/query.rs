//! Turning the sketch state into answers: cardinality, F2, point frequencies, and whether
//! Count-Min can be trusted.

use crate::hll::{self, Estimator};
use crate::sketch::{ItemKind, Sketch};
use crate::{Error, Result};

/// Count-Min is flagged untrustworthy when there are more than this many distinct items per
/// counter ... (see [`CountMinReport::trustworthy`]).
pub const TRUST_MAX_LOAD: f64 = 0.5;
/// ... unless a typical item's count exceeds the expected collisions in a row by this factor.
pub const TRUST_MAX_TYPICAL_ERROR: f64 = 0.05;

/// How far Count-Min answers can be trusted, judged from the count, HLL and F2 (reference 000
/// §4.3.5: large cardinality with a flat distribution makes Count-Min unusable).
#[derive(Clone, Debug, PartialEq)]
pub struct CountMinReport {
    /// Count-Min overestimates a point query by at most this many (ε·N with ε = 2/2^P) ...
    pub error_bound: f64,
    /// ... with this probability (1 − 2^−R), the bound of reference 000 §4.2.2.
    pub confidence: f64,
    /// Distinct items per counter (HLL cardinality / 2^P): how crowded each row is.
    pub collision_load: f64,
    /// Expected overcount of a typical item relative to its count in one row: N² / (2^P · F2).
    /// For a flat distribution of D items this equals D / 2^P; skew makes it small.
    pub typical_relative_error: f64,
    /// False when `collision_load > 0.5` and `typical_relative_error > 0.05`: many distinct
    /// items per counter and too little skew for counts to stand out from collisions.
    /// The reference measured Count-Min's worst error rising fast above 1,500 distinct items at
    /// P = 13 (load 0.18) and its average staying acceptable up to about three times that.
    pub trustworthy: bool,
}

/// Everything a sketch tells about its stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Items seen.
    pub count: u64,
    /// Estimated distinct items (HyperLogLog; `None` when the sketch keeps no HyperLogLog).
    pub cardinality: Option<f64>,
    /// The estimator used.
    pub estimator: Estimator,
    /// HLL's relative standard error, 1.04/sqrt(2^P) (`None` without HyperLogLog).
    pub cardinality_std_error: Option<f64>,
    /// Estimated second frequency moment F2 = Σ f_i² (Fast-AGMS; `None` without it).
    pub f2: Option<f64>,
    /// Per-row F2 estimates; `f2` is their median (empty without Fast-AGMS).
    pub f2_rows: Vec<f64>,
    /// Count-Min's bound and trust flag (`None` without Count-Min).
    pub count_min: Option<CountMinReport>,
}

impl Sketch {
    /// Estimated distinct items (`None` when the sketch keeps no HyperLogLog).
    pub fn cardinality(&self, estimator: Estimator) -> Option<f64> {
        self.params()
            .parts()
            .hll
            .then(|| hll::estimate(self.hll_registers(), self.params().hll_p, estimator))
    }

    /// Per-row Fast-AGMS estimates Σ counter².
    pub fn f2_rows(&self) -> Vec<f64> {
        let width = self.params().agms_width();
        self.agms_counters()
            .chunks_exact(width)
            .map(|row| {
                row.iter()
                    .map(|&c| (c as i128 * c as i128) as u128)
                    .sum::<u128>() as f64
            })
            .collect()
    }

    /// Estimated F2: the median over rows of Σ counter² (mean of the middle two for even R);
    /// `None` when the sketch keeps no Fast-AGMS.
    pub fn f2(&self) -> Option<f64> {
        self.params().parts().agms.then(|| median(self.f2_rows()))
    }

    /// Count-Min point query for a key given in the item's own encoding (4 or 8 little-endian
    /// bytes for integer items, the value's bytes otherwise). Never below the true count.
    pub fn frequency_of_bytes(&self, key: &[u8]) -> Result<u64> {
        if !self.params().parts().cm {
            return Err(Error::State(
                "this sketch keeps no Count-Min (it was made with a --sketches list without cm), so it cannot answer frequency queries".into(),
            ));
        }
        let h = match self.kind() {
            ItemKind::U32 => {
                let v: [u8; 4] = key.try_into().map_err(|_| {
                    Error::parameter("key length", key.len(), "4 bytes for u32 items")
                })?;
                crate::hash::hash_u32(
                    self.params().hash,
                    self.params().seed,
                    u32::from_le_bytes(v),
                )
            }
            ItemKind::U64 => {
                let v: [u8; 8] = key.try_into().map_err(|_| {
                    Error::parameter("key length", key.len(), "8 bytes for u64 items")
                })?;
                crate::hash::hash_u64(
                    self.params().hash,
                    self.params().seed,
                    u64::from_le_bytes(v),
                )
            }
            ItemKind::Bytes => self.hash_key(key),
        };
        Ok(self.frequency_of_hash(h))
    }

    /// Count-Min point query for a key typed as text: a decimal (or `0x` hex) number for integer
    /// items, the value itself for byte items.
    pub fn frequency(&self, key: &str) -> Result<u64> {
        match self.kind() {
            ItemKind::U32 => {
                let v = parse_int(key, u32::MAX as u64, "u32")? as u32;
                self.frequency_of_bytes(&v.to_le_bytes())
            }
            ItemKind::U64 => {
                let v = parse_int(key, u64::MAX, "u64")?;
                self.frequency_of_bytes(&v.to_le_bytes())
            }
            ItemKind::Bytes => self.frequency_of_bytes(key.as_bytes()),
        }
    }

    fn frequency_of_hash(&self, h: crate::hash::Hash128) -> u64 {
        let p = self.params().cm_p as u32;
        let mask = (1u64 << p) - 1;
        let blocks = self.blocks_of(h);
        (0..self.params().cm_rows as u32)
            .map(|row| {
                let (b, offset) = self.slicing().cm_slice(row, p);
                let (lo, hi) = blocks[b as usize];
                let bits = ((((hi as u128) << 64) | lo as u128) >> offset) as u64 & mask;
                self.cm_counter(row as usize, bits as usize)
            })
            .min()
            .unwrap_or(0)
    }

    /// Count-Min's error bound and trust flag (`None` when the sketch keeps no Count-Min). The
    /// collision load needs HyperLogLog and the typical error Fast-AGMS: without them they are
    /// NaN and the trust flag rests on what is there.
    pub fn count_min_report(&self, estimator: Estimator) -> Option<CountMinReport> {
        if !self.params().parts().cm {
            return None;
        }
        let width = self.params().cm_width() as f64;
        let n = self.count() as f64;
        let collision_load = self.cardinality(estimator).map_or(f64::NAN, |c| c / width);
        let typical_relative_error = match self.f2() {
            Some(f2) if f2 > 0.0 => n * n / (width * f2),
            Some(_) => 0.0,
            None => f64::NAN,
        };
        // NaN comparisons are false: a missing measure does not by itself distrust Count-Min.
        Some(CountMinReport {
            error_bound: 2.0 * n / width,
            confidence: 1.0 - (-(self.params().cm_rows as f64)).exp2(),
            collision_load,
            typical_relative_error,
            trustworthy: !(collision_load > TRUST_MAX_LOAD
                && typical_relative_error > TRUST_MAX_TYPICAL_ERROR),
        })
    }

    /// All estimates at once.
    pub fn summary(&self, estimator: Estimator) -> Summary {
        let f2_rows = self.f2_rows();
        let parts = self.params().parts();
        Summary {
            count: self.count(),
            cardinality: self.cardinality(estimator),
            estimator,
            cardinality_std_error: parts.hll.then(|| hll::standard_error(self.params().hll_p)),
            f2: parts.agms.then(|| median(f2_rows.clone())),
            f2_rows,
            count_min: self.count_min_report(estimator),
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn parse_int(text: &str, max: u64, kind: &str) -> Result<u64> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse::<u64>(),
    };
    match parsed {
        Ok(v) if v <= max => Ok(v),
        _ => Err(Error::parameter(
            "key",
            format!("{text:?}"),
            format!("an integer from 0 to {max} for {kind} items"),
        )),
    }
}
