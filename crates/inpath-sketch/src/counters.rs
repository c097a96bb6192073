//! Counter tables kept in three tiers, so the hot loop touches as little memory as possible.
//!
//! - **hot**, 16-bit: what the kernel increments. A 2^13-counter row is 16 KiB and stays in the
//!   L1 cache during a row pass.
//! - **mid**, 32-bit: the hot tier is added into it every [`HOT_LIMIT`] items (cheap, vectorised:
//!   a fraction of an instruction per item).
//! - **wide**, 64-bit: allocated only when the mid tier would pass [`MID_LIMIT`] items (two
//!   billion); until then the state stays small (640 KiB per lane at the defaults).
//!
//! No counter can change by more than one per item, so a tier that has absorbed at most `L`
//! items holds values within ±`L`: 32 767 items always fit an `i16`, 2^31 − 1 an `i32`.
//! Count-Min counters are never negative and use the same signed tiers.

/// Items the hot tier may absorb before it is folded into the mid tier.
pub const HOT_LIMIT: u64 = i16::MAX as u64;
/// Items the mid tier may absorb before it is folded into the wide tier.
pub const MID_LIMIT: u64 = i32::MAX as u64;

/// A table of counters in three tiers. Item counts per tier are kept by the owner, which folds
/// all its tables together.
#[derive(Clone, Debug)]
pub struct Tiers {
    pub(crate) hot: Vec<i16>,
    mid: Vec<i32>,
    wide: Option<Vec<i64>>,
}

impl Tiers {
    /// `len` zero counters.
    pub fn new(len: usize) -> Self {
        Tiers {
            hot: vec![0; len],
            mid: vec![0; len],
            wide: None,
        }
    }

    /// Counters in the table.
    pub fn len(&self) -> usize {
        self.hot.len()
    }

    /// Whether the table has no counters.
    pub fn is_empty(&self) -> bool {
        self.hot.is_empty()
    }

    /// Adds the hot tier into the mid tier and zeroes it.
    pub fn fold_hot(&mut self) {
        for (m, h) in self.mid.iter_mut().zip(self.hot.iter_mut()) {
            *m += *h as i32;
            *h = 0;
        }
    }

    /// Adds the mid tier into the wide tier (allocating it) and zeroes it.
    pub fn fold_mid(&mut self) {
        let len = self.mid.len();
        let wide = self.wide.get_or_insert_with(|| vec![0; len]);
        for (w, m) in wide.iter_mut().zip(self.mid.iter_mut()) {
            *w += *m as i64;
            *m = 0;
        }
    }

    /// The full value of counter `i`.
    pub fn total(&self, i: usize) -> i64 {
        self.hot[i] as i64 + self.mid[i] as i64 + self.wide.as_ref().map_or(0, |w| w[i])
    }

    /// Every counter's full value.
    pub fn totals(&self) -> Vec<i64> {
        (0..self.len()).map(|i| self.total(i)).collect()
    }

    /// Adds `other`'s hot tier into this mid tier (the caller ensures it fits).
    pub fn add_hot_to_mid(&mut self, other: &Tiers) {
        for (m, &h) in self.mid.iter_mut().zip(&other.hot) {
            *m += h as i32;
        }
    }

    /// Adds `other`'s mid and wide tiers into this wide tier.
    pub fn add_mid_and_wide_to_wide(&mut self, other: &Tiers) {
        let len = self.len();
        let wide = self.wide.get_or_insert_with(|| vec![0; len]);
        for (i, w) in wide.iter_mut().enumerate() {
            *w += other.mid[i] as i64 + other.wide.as_ref().map_or(0, |o| o[i]);
        }
    }

    /// Whether `other` holds anything outside its hot tier.
    pub fn has_mid_or_wide(&self, mid_items: u64) -> bool {
        mid_items > 0 || self.wide.is_some()
    }

    /// A table holding `totals`, in the mid tier when `items` fit it, else in the wide tier.
    pub fn from_totals(totals: Vec<i64>, items: u64) -> Self {
        let len = totals.len();
        if items <= MID_LIMIT {
            Tiers {
                hot: vec![0; len],
                mid: totals.iter().map(|&t| t as i32).collect(),
                wide: None,
            }
        } else {
            Tiers {
                hot: vec![0; len],
                mid: vec![0; len],
                wide: Some(totals),
            }
        }
    }

    /// Zeroes every tier and drops the wide one.
    pub fn clear(&mut self) {
        self.hot.fill(0);
        self.mid.fill(0);
        self.wide = None;
    }
}
