//! Sketch parameters and how the 128-bit hash is sliced among the three sketches.

use crate::{Error, HashMode, Result};

/// Which of the three sketches a [`Params`] keeps (min/max/count are always kept: they cost
/// next to nothing). Parsed from and printed as a list such as `hll,cm,agms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Parts {
    /// HyperLogLog (distinct count).
    pub hll: bool,
    /// Count-Min (point frequencies).
    pub cm: bool,
    /// Fast-AGMS (second frequency moment F2).
    pub agms: bool,
}

impl Parts {
    /// All three sketches (the default).
    pub const ALL: Parts = Parts {
        hll: true,
        cm: true,
        agms: true,
    };
    /// HyperLogLog only.
    pub const HLL: Parts = Parts {
        hll: true,
        cm: false,
        agms: false,
    };
    /// No sketch (not a valid choice for a sketch; used to report errors).
    pub const NONE: Parts = Parts {
        hll: false,
        cm: false,
        agms: false,
    };

    /// The names of the sketches kept, comma-separated (`hll,cm,agms`).
    pub fn names(&self) -> String {
        let mut names = Vec::new();
        if self.hll {
            names.push("hll");
        }
        if self.cm {
            names.push("cm");
        }
        if self.agms {
            names.push("agms");
        }
        names.join(",")
    }

    /// Parses a list of sketch names separated by `,` or `+`: `hll` (also `hyperloglog`), `cm`
    /// (`count-min`, `countmin`), `agms` (`fast-agms`, `f2`), or `all`.
    pub fn parse(text: &str) -> Result<Parts> {
        let mut parts = Parts::NONE;
        for name in text.split([',', '+']).map(str::trim) {
            match name.to_ascii_lowercase().as_str() {
                "hll" | "hyperloglog" => parts.hll = true,
                "cm" | "count-min" | "countmin" => parts.cm = true,
                "agms" | "fast-agms" | "f2" => parts.agms = true,
                "all" => parts = Parts::ALL,
                _ => {
                    return Err(Error::parameter(
                        "sketches",
                        format!("{text:?}"),
                        "a list of hll, cm, agms (or all), e.g. hll,cm",
                    ))
                }
            }
        }
        if parts == Parts::NONE {
            return Err(Error::parameter(
                "sketches",
                format!("{text:?}"),
                "at least one of hll, cm, agms",
            ));
        }
        Ok(parts)
    }
}

impl std::str::FromStr for Parts {
    type Err = Error;
    fn from_str(s: &str) -> Result<Parts> {
        Parts::parse(s)
    }
}

impl std::fmt::Display for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.names())
    }
}

/// Valid HyperLogLog precisions.
pub const HLL_P_RANGE: std::ops::RangeInclusive<u8> = 4..=18;
/// Valid row counts for Count-Min and Fast-AGMS (0 means that sketch is not kept).
pub const ROWS_RANGE: std::ops::RangeInclusive<u8> = 1..=16;
/// Valid index bits for Count-Min and Fast-AGMS rows.
pub const P_RANGE: std::ops::RangeInclusive<u8> = 4..=20;

/// Everything that fixes a sketch's layout and hashing. Two sketches merge only if their
/// parameters (and item kinds) are equal.
///
/// A sketch that is not kept has a zero size: `hll_p = 0` (no HyperLogLog), `cm_rows = 0` (no
/// Count-Min), `agms_rows = 0` (no Fast-AGMS). [`Params::with_parts`] sets them from a [`Parts`]
/// choice; the kernel then pays only for the sketches kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// HyperLogLog precision P: 2^P registers (4..=18, default 16; 0 = no HyperLogLog).
    pub hll_p: u8,
    /// Count-Min rows R (1..=16, default 6; 0 = no Count-Min).
    pub cm_rows: u8,
    /// Count-Min index bits P: 2^P counters per row (4..=20, default 13).
    pub cm_p: u8,
    /// Fast-AGMS rows R (1..=16, default 6; 0 = no Fast-AGMS).
    pub agms_rows: u8,
    /// Fast-AGMS index bits P: 2^P counters per row (4..=20, default 13).
    pub agms_p: u8,
    /// The hash function.
    pub hash: HashMode,
    /// The hash seed (32-bit in compat mode).
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params::with_hash(HashMode::Fast)
    }
}

impl Params {
    /// The SKT defaults (P_HLL = 16, 6×13 Count-Min and Fast-AGMS) with `hash` and its default
    /// seed.
    pub fn with_hash(hash: HashMode) -> Self {
        Params {
            hll_p: 16,
            cm_rows: 6,
            cm_p: 13,
            agms_rows: 6,
            agms_p: 13,
            hash,
            seed: hash.default_seed(),
        }
    }

    /// Checks every value against its range; in compat mode also that all slices fit in the one
    /// 128-bit MurmurHash3 (the reference's Eq. 4.3).
    pub fn validate(&self) -> Result<()> {
        if self.hll_p != 0 {
            check("hll_p", self.hll_p, HLL_P_RANGE)?;
        }
        if self.cm_rows != 0 {
            check("cm_rows", self.cm_rows, ROWS_RANGE)?;
        }
        check("cm_p", self.cm_p, P_RANGE)?;
        if self.agms_rows != 0 {
            check("agms_rows", self.agms_rows, ROWS_RANGE)?;
        }
        check("agms_p", self.agms_p, P_RANGE)?;
        if self.parts() == Parts::NONE {
            return Err(Error::parameter(
                "sketches",
                "none",
                "at least one of hll, cm, agms",
            ));
        }
        if self.seed > self.hash.max_seed() {
            return Err(Error::parameter(
                "seed",
                format!("{:#x}", self.seed),
                format!(
                    "0 to {:#x} in {} mode",
                    self.hash.max_seed(),
                    self.hash.name()
                ),
            ));
        }
        if self.hash == HashMode::Compat {
            let cm_bits = self.cm_rows as u32 * self.cm_p as u32;
            let agms_bits = self.agms_rows as u32 * (self.agms_p as u32 + 1);
            if cm_bits > 128 {
                return Err(Error::parameter(
                    "Count-Min rows x bits",
                    format!("{}x{} = {cm_bits} hash bits", self.cm_rows, self.cm_p),
                    "at most 128 bits in compat mode (one 128-bit MurmurHash3); use --hash fast for more",
                ));
            }
            if agms_bits > 128 {
                return Err(Error::parameter(
                    "Fast-AGMS rows x (bits + sign)",
                    format!("{}x{} = {agms_bits} hash bits", self.agms_rows, self.agms_p as u32 + 1),
                    "at most 128 bits in compat mode (one 128-bit MurmurHash3); use --hash fast for more",
                ));
            }
        }
        Ok(())
    }

    /// Which sketches these parameters keep.
    pub fn parts(&self) -> Parts {
        Parts {
            hll: self.hll_p != 0,
            cm: self.cm_rows != 0,
            agms: self.agms_rows != 0,
        }
    }

    /// These parameters keeping only the sketches in `parts` (the others get zero size; the
    /// sizes of the kept ones are unchanged, so their states equal a full sketch's).
    pub fn with_parts(mut self, parts: Parts) -> Self {
        if !parts.hll {
            self.hll_p = 0;
        }
        if !parts.cm {
            self.cm_rows = 0;
        }
        if !parts.agms {
            self.agms_rows = 0;
        }
        self
    }

    /// HLL registers (0 without HyperLogLog).
    pub fn hll_registers(&self) -> usize {
        if self.hll_p == 0 {
            0
        } else {
            1 << self.hll_p
        }
    }

    /// Counters per Count-Min row.
    pub fn cm_width(&self) -> usize {
        1 << self.cm_p
    }

    /// Counters per Fast-AGMS row.
    pub fn agms_width(&self) -> usize {
        1 << self.agms_p
    }

    /// Bytes of sketch state per lane while sketching: HLL registers plus 16-bit hot and 32-bit
    /// mid counter tiers, the Fast-AGMS hot tier split by sign (two 16-bit counts a counter);
    /// the 64-bit tier only exists after two billion items.
    pub fn state_bytes(&self) -> usize {
        self.hll_registers()
            + 6 * self.cm_rows as usize * self.cm_width()
            + 8 * self.agms_rows as usize * self.agms_width()
    }

    /// Where each row's bits come from (see [`Slicing`]).
    pub fn slicing(&self) -> Slicing {
        Slicing::new(self)
    }
}

fn check(name: &str, value: u8, range: std::ops::RangeInclusive<u8>) -> Result<()> {
    if range.contains(&value) {
        Ok(())
    } else {
        Err(Error::parameter(
            name,
            value,
            format!("{} to {}", range.start(), range.end()),
        ))
    }
}

/// How the hash is sliced. The 128-bit hash `h` is block 0 of a hash stream; blocks 1, 2... are
/// derived from `h` ([`crate::hash::extension_block`]) and only exist in fast mode when the rows
/// need more than 128 bits.
///
/// - HyperLogLog: bucket = the top P bits of `h`; rank = clz((h << P) | (2^P − 1)) + 1 over 128
///   bits, so ranks run from 1 to 129 − P.
/// - Count-Min row j: P bits starting at bit (j mod k)·P of block ⌊j / k⌋, with k = ⌊128 / P⌋
///   rows per block, counting from the least-significant bit. With R·P ≤ 128 that is bits
///   j·P .. j·P+P−1 of `h`, the reference layout.
/// - Fast-AGMS row j: likewise with P+1 bits per row; the low P bits index the counter, bit P is
///   the sign (+1 when set, −1 when clear).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slicing {
    /// Count-Min rows per 128-bit block.
    pub cm_rows_per_block: u32,
    /// Fast-AGMS rows per 128-bit block.
    pub agms_rows_per_block: u32,
    /// Blocks of the hash stream needed (1 unless the rows take more than 128 bits).
    pub blocks: u32,
}

impl Slicing {
    fn new(params: &Params) -> Self {
        let cm_rpb = 128 / params.cm_p as u32;
        let agms_rpb = 128 / (params.agms_p as u32 + 1);
        let cm_blocks = (params.cm_rows as u32).div_ceil(cm_rpb);
        let agms_blocks = (params.agms_rows as u32).div_ceil(agms_rpb);
        Slicing {
            cm_rows_per_block: cm_rpb,
            agms_rows_per_block: agms_rpb,
            blocks: cm_blocks.max(agms_blocks),
        }
    }

    /// (block, bit offset) of Count-Min row `row` with `p` index bits.
    pub fn cm_slice(&self, row: u32, p: u32) -> (u32, u32) {
        (
            row / self.cm_rows_per_block,
            (row % self.cm_rows_per_block) * p,
        )
    }

    /// (block, bit offset) of Fast-AGMS row `row` with `p` index bits (+1 sign bit).
    pub fn agms_slice(&self, row: u32, p: u32) -> (u32, u32) {
        (
            row / self.agms_rows_per_block,
            (row % self.agms_rows_per_block) * (p + 1),
        )
    }
}
