//! The two number types behind exact and accurate statistics: [`I256`], a 256-bit two's
//! complement integer (64-bit data products and the exact numerators of the coefficients), and
//! [`Dd`], a double-double (float data).

use std::cmp::Ordering;
use std::fmt;

/// A signed 256-bit integer: `hi * 2^128 + lo`, two's complement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct I256 {
    hi: i128,
    lo: u128,
}

impl I256 {
    /// Zero.
    pub const ZERO: I256 = I256 { hi: 0, lo: 0 };

    /// From its two halves: the value is `hi * 2^128 + lo`.
    pub fn from_parts(hi: i128, lo: u128) -> I256 {
        I256 { hi, lo }
    }

    /// The high half (signed).
    pub fn hi(self) -> i128 {
        self.hi
    }

    /// The low half (unsigned).
    pub fn lo(self) -> u128 {
        self.lo
    }

    /// Sign-extends an `i128`.
    pub fn from_i128(v: i128) -> I256 {
        I256 {
            hi: if v < 0 { -1 } else { 0 },
            lo: v as u128,
        }
    }

    /// The value as an `i128`, when it fits.
    pub fn to_i128(self) -> Option<i128> {
        let v = self.lo as i128;
        (I256::from_i128(v) == self).then_some(v)
    }

    /// Whether the value is below zero.
    pub fn is_negative(self) -> bool {
        self.hi < 0
    }

    /// Whether the value is zero.
    pub fn is_zero(self) -> bool {
        self.hi == 0 && self.lo == 0
    }

    /// `self + other`, `None` on overflow.
    pub fn checked_add(self, other: I256) -> Option<I256> {
        let (lo, carry) = self.lo.overflowing_add(other.lo);
        let hi = self.hi.checked_add(other.hi)?.checked_add(carry as i128)?;
        Some(I256 { hi, lo })
    }

    /// `-self`, `None` for the most negative value.
    pub fn checked_neg(self) -> Option<I256> {
        let lo = (!self.lo).wrapping_add(1);
        let hi = (!self.hi).checked_add((lo == 0) as i128)?;
        let neg = I256 { hi, lo };
        (self.is_zero() || neg.is_negative() != self.is_negative()).then_some(neg)
    }

    /// `self - other`, `None` on overflow.
    pub fn checked_sub(self, other: I256) -> Option<I256> {
        self.checked_add(other.checked_neg()?)
    }

    /// The magnitude as four little-endian 64-bit words, and the sign.
    fn magnitude(self) -> ([u64; 4], bool) {
        let negative = self.is_negative();
        let (hi, lo) = if negative {
            let lo = (!self.lo).wrapping_add(1);
            let hi = (!(self.hi as u128)).wrapping_add((lo == 0) as u128);
            (hi, lo)
        } else {
            (self.hi as u128, self.lo)
        };
        (
            [lo as u64, (lo >> 64) as u64, hi as u64, (hi >> 64) as u64],
            negative,
        )
    }

    fn from_magnitude(words: [u64; 4], negative: bool) -> Option<I256> {
        let lo = words[0] as u128 | (words[1] as u128) << 64;
        let hi = words[2] as u128 | (words[3] as u128) << 64;
        if hi >> 127 != 0 {
            // Only -2^255 has its top bit set, and it is not needed here.
            return None;
        }
        let value = I256 { hi: hi as i128, lo };
        if negative {
            value.checked_neg()
        } else {
            Some(value)
        }
    }

    /// The exact product of two `i128`s (it always fits).
    pub fn mul_i128(a: i128, b: i128) -> I256 {
        let (ma, mb) = (a.unsigned_abs(), b.unsigned_abs());
        let a_words = [ma as u64, (ma >> 64) as u64];
        let b_words = [mb as u64, (mb >> 64) as u64];
        let mut out = [0u64; 4];
        for (i, &x) in a_words.iter().enumerate() {
            let mut carry = 0u128;
            for (j, &y) in b_words.iter().enumerate() {
                let t = x as u128 * y as u128 + out[i + j] as u128 + carry;
                out[i + j] = t as u64;
                carry = t >> 64;
            }
            out[i + 2] = carry as u64;
        }
        // |a * b| <= 2^254, so the magnitude always fits.
        I256::from_magnitude(out, (a < 0) != (b < 0)).unwrap_or(I256::ZERO)
    }

    /// `self * k`, `None` on overflow.
    pub fn checked_mul_u64(self, k: u64) -> Option<I256> {
        let (words, negative) = self.magnitude();
        let mut out = [0u64; 4];
        let mut carry = 0u128;
        for (o, &w) in out.iter_mut().zip(words.iter()) {
            let t = w as u128 * k as u128 + carry;
            *o = t as u64;
            carry = t >> 64;
        }
        if carry != 0 {
            return None;
        }
        I256::from_magnitude(out, negative)
    }

    /// The nearest `f64` (round to nearest, ties to even).
    pub fn to_f64(self) -> f64 {
        let (words, negative) = self.magnitude();
        let hi = words[2] as u128 | (words[3] as u128) << 64;
        let lo = words[0] as u128 | (words[1] as u128) << 64;
        let magnitude = if hi == 0 {
            lo as f64
        } else {
            // Keep the top 128 bits; fold every bit shifted out into a sticky bit so the one
            // rounding of `u128 as f64` (which keeps 53 of at least 65 bits) is the correct one.
            let shift = 128 - hi.leading_zeros();
            let (top, sticky) = if shift >= 128 {
                (hi, lo != 0)
            } else {
                (
                    (hi << (128 - shift)) | (lo >> shift),
                    (lo << (128 - shift)) != 0,
                )
            };
            let top = top | sticky as u128;
            (top as f64) * 2f64.powi(shift as i32)
        };
        if negative {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The 32 little-endian bytes of the two's complement value.
    pub fn to_le_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..16].copy_from_slice(&self.lo.to_le_bytes());
        out[16..].copy_from_slice(&self.hi.to_le_bytes());
        out
    }

    /// Reads [`I256::to_le_bytes`].
    pub fn from_le_bytes(bytes: [u8; 32]) -> I256 {
        let mut lo = [0u8; 16];
        let mut hi = [0u8; 16];
        lo.copy_from_slice(&bytes[..16]);
        hi.copy_from_slice(&bytes[16..]);
        I256 {
            hi: i128::from_le_bytes(hi),
            lo: u128::from_le_bytes(lo),
        }
    }
}

impl PartialOrd for I256 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for I256 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.hi.cmp(&other.hi).then(self.lo.cmp(&other.lo))
    }
}

impl fmt::Display for I256 {
    /// The exact decimal value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(v) = self.to_i128() {
            return write!(f, "{v}");
        }
        let (mut words, negative) = self.magnitude();
        let mut groups = Vec::new();
        const BASE: u64 = 10_000_000_000_000_000_000;
        while words.iter().any(|w| *w != 0) {
            let mut rem = 0u128;
            for w in words.iter_mut().rev() {
                let cur = rem << 64 | *w as u128;
                *w = (cur / BASE as u128) as u64;
                rem = cur % BASE as u128;
            }
            groups.push(rem as u64);
        }
        let mut text = String::new();
        if negative {
            text.push('-');
        }
        for (i, g) in groups.iter().rev().enumerate() {
            if i == 0 {
                text.push_str(&g.to_string());
            } else {
                text.push_str(&format!("{g:019}"));
            }
        }
        f.write_str(&text)
    }
}

/// A double-double: the unevaluated sum `hi + lo` with `|lo| <= ulp(hi) / 2`, about 106 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dd {
    /// The leading part.
    pub hi: f64,
    /// The trailing part.
    pub lo: f64,
}

/// Knuth's TwoSum: `s + e == a + b` exactly.
#[inline(always)]
pub(crate) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

#[inline(always)]
fn quick_two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    (s, b - (s - a))
}

impl Dd {
    /// Zero.
    pub const ZERO: Dd = Dd { hi: 0.0, lo: 0.0 };

    /// An exact `f64`.
    pub fn from_f64(v: f64) -> Dd {
        Dd { hi: v, lo: 0.0 }
    }

    /// The nearest `f64`.
    pub fn to_f64(self) -> f64 {
        self.hi + self.lo
    }
}

impl std::ops::Add for Dd {
    type Output = Dd;

    /// Double-double addition (about 106 bits).
    fn add(self, other: Dd) -> Dd {
        let (s, e) = two_sum(self.hi, other.hi);
        let (t, f) = two_sum(self.lo, other.lo);
        let (s, e) = quick_two_sum(s, e + t);
        let (hi, lo) = quick_two_sum(s, e + f);
        if hi.is_finite() {
            Dd { hi, lo }
        } else {
            Dd { hi, lo: 0.0 }
        }
    }
}

impl std::ops::Neg for Dd {
    type Output = Dd;

    fn neg(self) -> Dd {
        Dd {
            hi: -self.hi,
            lo: -self.lo,
        }
    }
}

impl std::ops::Sub for Dd {
    type Output = Dd;

    fn sub(self, other: Dd) -> Dd {
        self + -other
    }
}

impl std::ops::Mul for Dd {
    type Output = Dd;

    /// Double-double multiplication (the leading product made exact with a fused multiply-add).
    fn mul(self, other: Dd) -> Dd {
        let p = self.hi * other.hi;
        let e = self.hi.mul_add(other.hi, -p);
        let e = e + (self.hi * other.lo + self.lo * other.hi);
        let (hi, lo) = quick_two_sum(p, e);
        if hi.is_finite() {
            Dd { hi, lo }
        } else {
            Dd { hi, lo: 0.0 }
        }
    }
}

impl Dd {
    /// The nearest double-double of an `I256` (for mixing exact and float paths).
    pub fn from_i256(v: I256) -> Dd {
        let hi = v.to_f64();
        if !hi.is_finite() {
            return Dd { hi, lo: 0.0 };
        }
        // The remainder v - hi is exact in I256 when hi is an integer (it is: |v| >= 2^53 or
        // v is exactly representable).
        let rest = v
            .checked_sub(i256_from_f64(hi))
            .map(|r| r.to_f64())
            .unwrap_or(0.0);
        let (hi, lo) = quick_two_sum(hi, rest);
        Dd { hi, lo }
    }
}

/// The exact `I256` of an integral `f64` below 2^254 in magnitude.
fn i256_from_f64(v: f64) -> I256 {
    if v.abs() < 1.7e38 {
        return I256::from_i128(v as i128);
    }
    let bits = v.abs().to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mant = (bits & ((1 << 52) - 1)) | (1 << 52);
    // mant * 2^exp with exp > 0 here.
    let mut words = [0u64; 4];
    let word = (exp / 64) as usize;
    let bit = exp % 64;
    if word < 4 {
        words[word] |= mant << bit;
        if bit > 0 && word + 1 < 4 {
            words[word + 1] |= mant >> (64 - bit);
        }
    }
    I256::from_magnitude(words, v < 0.0).unwrap_or(I256::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i256_arithmetic_small_values() {
        for a in [-5i128, -1, 0, 1, 7, i128::MAX, i128::MIN] {
            for b in [-3i128, 0, 2, i128::MAX, i128::MIN + 1] {
                let s = I256::from_i128(a).checked_add(I256::from_i128(b)).unwrap();
                let expect = a.checked_add(b);
                if let Some(e) = expect {
                    assert_eq!(s.to_i128(), Some(e));
                }
                let p = I256::mul_i128(a, b);
                if let Some(e) = a.checked_mul(b) {
                    assert_eq!(p.to_i128(), Some(e));
                }
            }
        }
        assert_eq!(I256::mul_i128(i128::MAX, i128::MAX).to_string(), {
            // (2^127-1)^2 = 2^254 - 2^128 + 1
            "28948022309329048855892746252171976962977213799489202546401021394546514198529"
        });
        assert_eq!(I256::from_i128(-12).to_string(), "-12");
        assert_eq!(
            I256::mul_i128(-(1 << 100), 1 << 100).to_string(),
            "-1606938044258990275541962092341162602522202993782792835301376"
        );
    }

    #[test]
    fn i256_to_f64_rounds_correctly() {
        // 2^200 + 1 rounds to 2^200; 2^200 + 2^147 (half an ulp) ties to even (2^200).
        let big = I256::mul_i128(1 << 100, 1 << 100);
        assert_eq!(
            big.checked_add(I256::from_i128(1)).unwrap().to_f64(),
            2f64.powi(200)
        );
        let half_ulp = I256::mul_i128(1 << 100, 1 << 47);
        assert_eq!(big.checked_add(half_ulp).unwrap().to_f64(), 2f64.powi(200));
        // Just above half an ulp rounds up.
        let above = big
            .checked_add(half_ulp)
            .unwrap()
            .checked_add(I256::from_i128(1))
            .unwrap();
        assert_eq!(above.to_f64(), 2f64.powi(200) + 2f64.powi(148));
        assert_eq!(big.checked_neg().unwrap().to_f64(), -(2f64.powi(200)));
    }

    #[test]
    fn dd_keeps_what_f64_loses() {
        let mut s = Dd::ZERO;
        for _ in 0..10 {
            s = s + Dd::from_f64(1e16) + Dd::from_f64(1.0);
        }
        assert_eq!(s.hi + s.lo, 1e17 + 10.0);
        assert_eq!((s - Dd::from_f64(1e17)).to_f64(), 10.0);
        let p = Dd::from_f64(1.0 + 2f64.powi(-30)) * Dd::from_f64(1.0 - 2f64.powi(-30));
        assert_eq!(p.hi, 1.0);
        assert_eq!(p.lo, -(2f64.powi(-60)));
        let v = I256::mul_i128(3 << 90, (1 << 90) + 1);
        let d = Dd::from_i256(v);
        assert_eq!(d.hi, v.to_f64());
    }
}
