//! HyperLogLog cardinality estimators over the register array.
//!
//! Registers hold ranks 0 (empty) to q + 1 with q = 128 − P, since the rank is taken over the
//! 128-bit hash below the P bucket bits.

/// Which estimator turns registers into a cardinality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Estimator {
    /// Otmar Ertl's improved estimator ("New cardinality estimation algorithms for HyperLogLog
    /// sketches", 2017, Algorithm 6): no empirical bias tables, accurate over the whole range
    /// from empty to far beyond 2^64. The default.
    Ertl,
    /// The SKT reference software's estimator: the raw harmonic-mean estimate with
    /// α_m = 0.7213·m/(m + 1.079), replaced by linear counting m·ln(m/V) when it is at most
    /// 2.5·m and V > 0 registers are empty; no large-range correction.
    Reference,
}

impl Estimator {
    /// Every estimator.
    pub const ALL: [Estimator; 2] = [Estimator::Ertl, Estimator::Reference];

    /// One line on what it is (the CLI's `--help`).
    pub fn about(self) -> &'static str {
        match self {
            Estimator::Ertl => "Ertl's improved estimator (accurate over the whole range)",
            Estimator::Reference => "The SKT reference: raw HLL with linear counting below 2.5·m",
        }
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Estimator::Ertl => "ertl",
            Estimator::Reference => "reference",
        }
    }
}

impl std::str::FromStr for Estimator {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ertl" => Ok(Estimator::Ertl),
            "reference" => Ok(Estimator::Reference),
            other => Err(crate::Error::parameter(
                "estimator",
                other,
                "ertl or reference",
            )),
        }
    }
}

/// Estimates the cardinality from `registers` (2^p of them).
pub fn estimate(registers: &[u8], p: u8, estimator: Estimator) -> f64 {
    match estimator {
        Estimator::Ertl => ertl(registers, p),
        Estimator::Reference => reference(registers),
    }
}

/// The relative standard error of the estimate, 1.04 / sqrt(2^p).
pub fn standard_error(p: u8) -> f64 {
    1.04 / ((1u64 << p) as f64).sqrt()
}

fn ertl(registers: &[u8], p: u8) -> f64 {
    estimate_ranks(registers, 128 - p as usize)
}

/// Ertl's improved estimator over registers holding ranks 0 (empty) to `q + 1` (a rank of
/// `q + 1` meaning "at least `q + 1`"): `q = 128 − P` for inpath's sketch, 62 for DataSketches'
/// registers (leading zeros of a 64-bit word plus one, at most 63).
pub fn estimate_ranks(registers: &[u8], q: usize) -> f64 {
    let m = registers.len() as f64;
    let mut histogram = vec![0u64; q + 2];
    for &r in registers {
        histogram[(r as usize).min(q + 1)] += 1;
    }
    let mut z = m * tau((m - histogram[q + 1] as f64) / m);
    for k in (1..=q).rev() {
        z += histogram[k] as f64;
        z *= 0.5;
    }
    z += m * sigma(histogram[0] as f64 / m);
    let alpha_inf = 0.5 / std::f64::consts::LN_2;
    alpha_inf * m * m / z
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if z == previous {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if z == previous {
            return z / 3.0;
        }
    }
}

fn reference(registers: &[u8]) -> f64 {
    let m = registers.len() as f64;
    let alpha = 0.7213 * m / (m + 1.079);
    let mut sum = 0.0f64;
    let mut zeros = 0u64;
    for &r in registers {
        sum += (-(r as f64)).exp2();
        zeros += (r == 0) as u64;
    }
    let raw = alpha * m * m / sum;
    if raw <= 2.5 * m && zeros > 0 {
        m * (m / zeros as f64).ln()
    } else {
        raw
    }
}
