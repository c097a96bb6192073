//! A semi or anti join's condition beyond its keys over an aggregate's groups (graph version
//! 9): TPC-H Q17's `l_quantity < 0.2 * avg(l_quantity)` and Q20's `ps_availqty > 0.5 *
//! sum(l_quantity)`, where the SQL engine computes the right side in doubles and casts. The
//! device computes each side as the host's expression does, cast by cast and operation by
//! operation in the same types (Arrow's casts: a decimal to a double divides by a power of
//! ten; a double to a decimal rounds its product with one), so it keeps exactly the rows the
//! host would.

use super::{CmpOp, Source};
use serde::{Deserialize, Serialize};

/// `left op right`, tested on each pair of a probe row and a build row with its keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// The comparison.
    pub op: CmpOp,
    /// Its left side.
    pub left: Value,
    /// Its right side.
    pub right: Value,
}

/// A value of a probe row and a build row: an integer (a scaled decimal, a date, a count) or
/// a double.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// The probe row's value (an integer).
    Probe(Source),
    /// The build row's kept column (an integer).
    Build(usize),
    /// A double constant.
    Float(f64),
    /// An integer holding `scale` decimal digits, as a double: the integer as a double
    /// divided by ten to the `scale` (Arrow's cast of a decimal to Float64).
    ToFloat {
        /// The integer.
        of: Box<Value>,
        /// Its decimal digits.
        scale: i8,
    },
    /// A double as a decimal of `precision` digits, `scale` after the point: the double times
    /// ten to the `scale`, rounded half away from zero (Arrow's cast); null when the result
    /// has more than `precision` digits.
    FromFloat {
        /// The double.
        of: Box<Value>,
        /// Digits after the point.
        scale: i8,
        /// Total digits.
        precision: u8,
    },
    /// An integer times ten to the `by` (a decimal cast to `by` more digits after the
    /// point); null beyond 38 digits.
    Rescale {
        /// The integer.
        of: Box<Value>,
        /// Digits added.
        by: u8,
    },
    /// Doubles added.
    Add(Box<Value>, Box<Value>),
    /// Doubles subtracted.
    Sub(Box<Value>, Box<Value>),
    /// Doubles multiplied.
    Mul(Box<Value>, Box<Value>),
    /// Doubles divided.
    Div(Box<Value>, Box<Value>),
}

/// A computed value; `None` is SQL's null.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// An integer.
    Int(i128),
    /// A double.
    Float(f64),
}

impl Value {
    /// Whether the value is a double (else an integer), or none if it mixes them where it
    /// cannot (a double operation on integers, a cast from the wrong kind).
    pub fn is_float(&self) -> Option<bool> {
        let need = |v: &Value, float: bool| (v.is_float()? == float).then_some(());
        Some(match self {
            Value::Probe(_) | Value::Build(_) => false,
            Value::Float(_) => true,
            Value::ToFloat { of, .. } => {
                need(of, false)?;
                true
            }
            Value::FromFloat { of, .. } => {
                need(of, true)?;
                false
            }
            Value::Rescale { of, .. } => {
                need(of, false)?;
                false
            }
            Value::Add(a, b) | Value::Sub(a, b) | Value::Mul(a, b) | Value::Div(a, b) => {
                need(a, true)?;
                need(b, true)?;
                true
            }
        })
    }

    /// The values it is computed from.
    fn children(&self) -> Vec<&Value> {
        match self {
            Value::Probe(_) | Value::Build(_) | Value::Float(_) => Vec::new(),
            Value::ToFloat { of, .. } | Value::FromFloat { of, .. } | Value::Rescale { of, .. } => {
                vec![of]
            }
            Value::Add(a, b) | Value::Sub(a, b) | Value::Mul(a, b) | Value::Div(a, b) => {
                vec![a, b]
            }
        }
    }

    /// The probe row's values it reads.
    pub fn sources(&self) -> Vec<&Source> {
        match self {
            Value::Probe(s) => vec![s],
            v => v.children().into_iter().flat_map(Value::sources).collect(),
        }
    }

    /// The build row's columns it reads.
    pub fn build_columns(&self) -> Vec<usize> {
        match self {
            Value::Build(c) => vec![*c],
            v => v
                .children()
                .into_iter()
                .flat_map(Value::build_columns)
                .collect(),
        }
    }

    /// The value for one pair: `probe` gives the probe row's values, `build` the build row's.
    pub fn eval(
        &self,
        probe: &dyn Fn(&Source) -> i64,
        build: &dyn Fn(usize) -> i64,
    ) -> Option<Num> {
        let float = |v: &Value| match v.eval(probe, build)? {
            Num::Float(f) => Some(f),
            Num::Int(_) => None,
        };
        let int = |v: &Value| match v.eval(probe, build)? {
            Num::Int(i) => Some(i),
            Num::Float(_) => None,
        };
        Some(match self {
            Value::Probe(s) => Num::Int(probe(s) as i128),
            Value::Build(c) => Num::Int(build(*c) as i128),
            Value::Float(f) => Num::Float(*f),
            Value::ToFloat { of, scale } => {
                Num::Float(int(of)? as f64 / 10f64.powi(i32::from(*scale)))
            }
            Value::FromFloat {
                of,
                scale,
                precision,
            } => {
                let scaled = (10f64.powi(i32::from(*scale)) * float(of)?).round();
                let limit = 10i128.checked_pow(u32::from(*precision))?;
                // An i128 holds every double below 2^127; beyond, or NaN, Arrow gives null.
                if !scaled.is_finite() || scaled.abs() >= 1.7e38 {
                    return None;
                }
                let v = scaled as i128;
                if v.unsigned_abs() >= limit.unsigned_abs() {
                    return None;
                }
                Num::Int(v)
            }
            Value::Rescale { of, by } => {
                let v = int(of)?.checked_mul(10i128.checked_pow(u32::from(*by))?)?;
                if v.unsigned_abs() >= 10u128.pow(38) {
                    return None;
                }
                Num::Int(v)
            }
            Value::Add(a, b) => Num::Float(float(a)? + float(b)?),
            Value::Sub(a, b) => Num::Float(float(a)? - float(b)?),
            Value::Mul(a, b) => Num::Float(float(a)? * float(b)?),
            Value::Div(a, b) => Num::Float(float(a)? / float(b)?),
        })
    }
}

impl Condition {
    /// Whether the pair passes (a null side never does). Doubles compare as SQL engines
    /// compare them (Arrow's total order: NaN above every number, equal to itself).
    pub fn holds(&self, probe: &dyn Fn(&Source) -> i64, build: &dyn Fn(usize) -> i64) -> bool {
        let (Some(l), Some(r)) = (self.left.eval(probe, build), self.right.eval(probe, build))
        else {
            return false;
        };
        let ord = match (l, r) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            (Num::Float(a), Num::Float(b)) => a.total_cmp(&b),
            _ => return false,
        };
        self.op.holds(ord, std::cmp::Ordering::Equal)
    }

    /// Whether both sides are of one kind (integers or doubles), and the values well formed.
    pub fn well_formed(&self) -> bool {
        matches!(
            (self.left.is_float(), self.right.is_float()),
            (Some(a), Some(b)) if a == b
        )
    }
}
