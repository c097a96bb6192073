//! Everything computed from the statistics: Pearson (reference Eq. 3.2), covariance, means and
//! standard deviations, regression slope and intercept (Eq. 3.7, also through the origin) and
//! cosine similarity (Eq. 3.8).
//!
//! For integer types the centred numerators `N*Sxy - Sx*Sy` and `N*Sxx - Sx^2` are computed
//! exactly (256-bit integers) and rounded once to `f64`, so every coefficient is within a few
//! units in the last place of the exact value, however large the means. For float types they
//! are computed in double-double arithmetic from double-double statistics.

use crate::stats::{Data, Statistics};
use crate::wide::{Dd, I256};

/// What to report for a coefficient whose denominator is zero (a constant stream).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NanPolicy {
    /// Not a number: the coefficient is undefined (the default).
    #[default]
    Nan,
    /// 0.0, as the reference hardware's coefficient engine does.
    Zero,
}

impl NanPolicy {
    /// Every policy.
    pub const ALL: [NanPolicy; 2] = [NanPolicy::Nan, NanPolicy::Zero];

    /// The name used on the command line (`--constant`) and in tap options (`constant=`).
    pub fn name(self) -> &'static str {
        match self {
            NanPolicy::Nan => "nan",
            NanPolicy::Zero => "zero",
        }
    }

    /// One line on what it reports (the CLI's `--help`).
    pub fn about(self) -> &'static str {
        match self {
            NanPolicy::Nan => "NaN (JSON null): the coefficient is undefined",
            NanPolicy::Zero => "0.0, as the reference hardware reports it",
        }
    }

    fn undefined(self) -> f64 {
        match self {
            NanPolicy::Nan => f64::NAN,
            NanPolicy::Zero => 0.0,
        }
    }
}

/// Which normalisation variances and covariances use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ddof {
    /// Divide by N - 1 (sample; numpy.cov, pandas).
    #[default]
    Sample,
    /// Divide by N (population).
    Population,
}

/// Simple linear regression of one stream on another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Regression {
    /// Least-squares slope m of y = m x + n (Eq. 3.7).
    pub slope: f64,
    /// Least-squares intercept n.
    pub intercept: f64,
    /// Slope of the least-squares line through the origin, Sxy / Sxx.
    pub slope_origin: f64,
}

/// A centred numerator: exact for integers, double-double for floats.
#[derive(Clone, Copy)]
enum Centred {
    Int(I256),
    Float(Dd),
}

impl Centred {
    fn to_f64(self) -> f64 {
        match self {
            Centred::Int(v) => v.to_f64(),
            Centred::Float(d) => d.to_f64(),
        }
    }
}

/// Float statistics resolve variances only to about this fraction of N * Sxx; below it a
/// stream is reported as constant.
const FLOAT_VARIANCE_FLOOR: f64 = 1e-13;

impl Statistics {
    fn n(&self) -> u64 {
        self.count()
    }

    /// `N * S_ij - S_i * S_j`, `None` if it does not fit (more than 2^62 rows).
    fn centred(&self, i: usize, j: usize) -> Option<Centred> {
        let n = self.n();
        let m = self.streams();
        let (lo, hi) = (i.min(j), i.max(j));
        let k = crate::stats::tri_row(m, lo) + (hi - lo);
        match &self.data {
            Data::Int { sums, products } => {
                let a = I256::from_i128(products[k]).checked_mul_u64(n)?;
                a.checked_sub(I256::mul_i128(sums[i], sums[j]))
                    .map(Centred::Int)
            }
            Data::Wide { sums, products } => {
                let a = products[k].checked_mul_u64(n)?;
                a.checked_sub(I256::mul_i128(sums[i], sums[j]))
                    .map(Centred::Int)
            }
            Data::Float { sums, products } => {
                let nd = Dd::from_f64(n as f64);
                Some(Centred::Float(products[k] * nd - sums[i] * sums[j]))
            }
        }
    }

    /// `N * S_ii - S_i^2` as an `f64` (0 for a constant stream; for floats, 0 when below what
    /// the accumulation resolves).
    fn centred_var(&self, i: usize) -> f64 {
        match self.centred(i, i) {
            Some(Centred::Int(v)) => v.to_f64(),
            Some(Centred::Float(d)) => {
                let v = d.to_f64();
                let scale = self.sum_of_squares(i).to_f64().abs() * self.n() as f64;
                if v.is_nan() {
                    f64::NAN
                } else if v <= FLOAT_VARIANCE_FLOOR * scale {
                    0.0
                } else {
                    v
                }
            }
            None => f64::NAN,
        }
    }

    /// Index of the coefficient of pair `(i, j)`, `i < j`, in the reference order: the upper
    /// triangle without the diagonal, row by row: (0,1), (0,2), ..., (0,M-1), (1,2), ...
    pub fn pair_index(&self, i: usize, j: usize) -> usize {
        let m = self.streams();
        assert!(
            i < j && j < m,
            "pair ({i}, {j}) is not in the upper triangle of {m} streams"
        );
        i * m - i * (i + 1) / 2 + (j - i - 1)
    }

    /// The pair `(i, j)` at coefficient index `z` (the inverse of [`Statistics::pair_index`]).
    pub fn pair_at(&self, z: usize) -> (usize, usize) {
        let m = self.streams();
        let mut i = 0;
        let mut start = 0;
        while start + (m - i - 1) <= z {
            start += m - i - 1;
            i += 1;
        }
        (i, i + 1 + (z - start))
    }

    /// Every pair `(i, j)`, `i < j`, in the reference order.
    pub fn pair_list(&self) -> Vec<(usize, usize)> {
        let m = self.streams();
        (0..m)
            .flat_map(|i| (i + 1..m).map(move |j| (i, j)))
            .collect()
    }

    fn std_numerators(&self) -> Vec<f64> {
        (0..self.streams())
            .map(|i| self.centred_var(i).max(0.0))
            .collect()
    }

    /// Pearson's r of streams `i` and `j` (Eq. 3.2).
    pub fn pearson_pair(&self, i: usize, j: usize, policy: NanPolicy) -> f64 {
        let vi = self.centred_var(i).max(0.0);
        let vj = self.centred_var(j).max(0.0);
        self.pearson_with(i, j, vi, vj, policy)
    }

    /// r from the centred variances `vi`, `vj`: `c / sqrt(vi * vj)` (exactly +-1 when one
    /// stream is an exact multiple of the other), or `c / sqrt(vi) / sqrt(vj)` where the
    /// product would overflow.
    fn pearson_with(&self, i: usize, j: usize, vi: f64, vj: f64, policy: NanPolicy) -> f64 {
        if vi.is_nan() || vj.is_nan() {
            return f64::NAN;
        }
        if vi == 0.0 || vj == 0.0 || self.n() < 2 {
            return policy.undefined();
        }
        if i == j {
            return 1.0;
        }
        let c = match self.centred(i, j) {
            Some(c) => c.to_f64(),
            None => return f64::NAN,
        };
        let product = vi * vj;
        let r = if product.is_finite() && product > 0.0 {
            c / product.sqrt()
        } else {
            c / vi.sqrt() / vj.sqrt()
        };
        r.clamp(-1.0, 1.0)
    }

    /// Every Pearson coefficient, M(M-1)/2 of them in the reference order ([`Statistics::pair_index`]).
    pub fn pearson(&self, policy: NanPolicy) -> Vec<f64> {
        let s = self.std_numerators();
        self.pair_list()
            .into_iter()
            .map(|(i, j)| self.pearson_with(i, j, s[i], s[j], policy))
            .collect()
    }

    /// The full M x M Pearson matrix, row-major, with 1 on the diagonal (NaN or 0 for constant
    /// streams, per `policy`).
    pub fn pearson_matrix(&self, policy: NanPolicy) -> Vec<f64> {
        let m = self.streams();
        let s = self.std_numerators();
        let mut out = vec![0.0; m * m];
        for i in 0..m {
            for j in i..m {
                let r = self.pearson_with(i, j, s[i], s[j], policy);
                out[i * m + j] = r;
                out[j * m + i] = r;
            }
        }
        out
    }

    /// Mean of every stream (NaN when there are no rows).
    pub fn means(&self) -> Vec<f64> {
        (0..self.streams()).map(|i| self.mean(i)).collect()
    }

    fn mean(&self, i: usize) -> f64 {
        self.sum(i).to_f64() / self.n() as f64
    }

    fn divisor(&self, ddof: Ddof) -> f64 {
        let n = self.n() as f64;
        match ddof {
            Ddof::Sample => n * (n - 1.0),
            Ddof::Population => n * n,
        }
    }

    /// Variance of every stream.
    pub fn variances(&self, ddof: Ddof) -> Vec<f64> {
        let d = self.divisor(ddof);
        (0..self.streams())
            .map(|i| self.centred_var(i) / d)
            .collect()
    }

    /// Standard deviation of every stream.
    pub fn std_devs(&self, ddof: Ddof) -> Vec<f64> {
        self.variances(ddof).into_iter().map(f64::sqrt).collect()
    }

    /// Covariance of streams `i` and `j` (the variance when `i == j`).
    pub fn covariance_pair(&self, i: usize, j: usize, ddof: Ddof) -> f64 {
        if i == j {
            return self.centred_var(i) / self.divisor(ddof);
        }
        self.centred(i, j)
            .map_or(f64::NAN, |c| c.to_f64() / self.divisor(ddof))
    }

    /// Every covariance of a pair, M(M-1)/2 of them in the reference order.
    pub fn covariance(&self, ddof: Ddof) -> Vec<f64> {
        self.pair_list()
            .into_iter()
            .map(|(i, j)| self.covariance_pair(i, j, ddof))
            .collect()
    }

    /// Least-squares regression of stream `y` on stream `x` (Eq. 3.7, and through the origin).
    pub fn regression(&self, x: usize, y: usize, policy: NanPolicy) -> Regression {
        let var_x = self.centred_var(x);
        let sxx = self.sum_of_squares(x).to_f64();
        let sxy = self.sum_of_products(x, y).to_f64();
        let slope_origin = if sxx == 0.0 {
            policy.undefined()
        } else {
            sxy / sxx
        };
        if var_x == 0.0 || var_x.is_nan() {
            let u = if var_x.is_nan() {
                f64::NAN
            } else {
                policy.undefined()
            };
            return Regression {
                slope: u,
                intercept: u,
                slope_origin,
            };
        }
        if self.centred_var(y) == 0.0 {
            // A constant y: the line is flat through its value (exactly, not up to rounding).
            let mean_y = self.mean(y);
            return Regression {
                slope: 0.0,
                intercept: mean_y,
                slope_origin,
            };
        }
        let slope = self.centred(x, y).map_or(f64::NAN, |c| c.to_f64() / var_x);
        let n = self.n() as f64;
        let intercept = match (&self.data, self.sum(x), self.sum(y)) {
            // Exactly (Sy * Sxx - Sxy * Sx) / (N Sxx - Sx^2) where that fits 256 bits.
            (Data::Int { sums, products }, _, _) => {
                let m = self.streams();
                let kxx = crate::stats::tri_row(m, x);
                let (lo, hi) = (x.min(y), x.max(y));
                let kxy = crate::stats::tri_row(m, lo) + (hi - lo);
                let num = I256::mul_i128(sums[y], products[kxx])
                    .checked_sub(I256::mul_i128(products[kxy], sums[x]));
                num.map_or(f64::NAN, |v| v.to_f64() / var_x)
            }
            (_, sx, sy) => (sy.to_f64() - slope * sx.to_f64()) / n,
        };
        Regression {
            slope,
            intercept,
            slope_origin,
        }
    }

    /// Cosine similarity of streams `i` and `j` (Eq. 3.8): Sxy / (sqrt(Sxx) sqrt(Syy)).
    /// Cosine distance is `1 - similarity`.
    pub fn cosine_pair(&self, i: usize, j: usize, policy: NanPolicy) -> f64 {
        let sxx = self.sum_of_squares(i).to_f64();
        let syy = self.sum_of_squares(j).to_f64();
        if sxx == 0.0 || syy == 0.0 {
            return policy.undefined();
        }
        (self.sum_of_products(i, j).to_f64() / sxx.sqrt() / syy.sqrt()).clamp(-1.0, 1.0)
    }

    /// Every cosine similarity, M(M-1)/2 of them in the reference order.
    pub fn cosine(&self, policy: NanPolicy) -> Vec<f64> {
        self.pair_list()
            .into_iter()
            .map(|(i, j)| self.cosine_pair(i, j, policy))
            .collect()
    }
}
