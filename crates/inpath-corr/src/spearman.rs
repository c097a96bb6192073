//! Spearman's rank correlation: the Pearson correlation of the ranks.
//!
//! A rank depends on every other value of the stream, so it cannot be known while the stream
//! passes: this is a two-pass method. Pass one holds every value in memory (16 bytes per item);
//! pass two ranks each stream (tied values share their average rank) and runs the exact Pearson
//! engine over the ranks. Ranks are stored doubled (`2 * average rank`, always an integer), which
//! leaves every correlation unchanged.

use crate::DType;
use inpath_core::{Error, Result};

enum Columns {
    Int(Vec<Vec<i128>>),
    Float(Vec<Vec<f64>>),
}

pub(crate) struct Collector {
    dtype: DType,
    m: usize,
    columns: Columns,
}

impl Collector {
    pub fn new(dtype: DType, m: usize) -> Collector {
        let columns = if dtype.is_float() {
            Columns::Float(vec![Vec::new(); m])
        } else {
            Columns::Int(vec![Vec::new(); m])
        };
        Collector { dtype, m, columns }
    }

    pub fn push_rows(&mut self, bytes: &[u8]) -> Result<()> {
        let w = self.dtype.width();
        for row in bytes.chunks_exact(self.m * w) {
            for (i, item) in row.chunks_exact(w).enumerate() {
                let mut b = [0u8; 8];
                b[..w].copy_from_slice(item);
                match &mut self.columns {
                    Columns::Int(cols) => cols[i].push(match self.dtype {
                        DType::U8 => b[0] as i128,
                        DType::I8 => b[0] as i8 as i128,
                        DType::U16 => u16::from_le_bytes([b[0], b[1]]) as i128,
                        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as i128,
                        DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i128,
                        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i128,
                        DType::U64 => u64::from_le_bytes(b) as i128,
                        _ => i64::from_le_bytes(b) as i128,
                    }),
                    Columns::Float(cols) => cols[i].push(match self.dtype {
                        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
                        _ => f64::from_le_bytes(b),
                    }),
                }
            }
        }
        Ok(())
    }

    pub fn merge(&mut self, other: &Collector) -> Result<()> {
        match (&mut self.columns, &other.columns) {
            (Columns::Int(a), Columns::Int(b)) if a.len() == b.len() => {
                a.iter_mut()
                    .zip(b)
                    .for_each(|(x, y)| x.extend_from_slice(y));
            }
            (Columns::Float(a), Columns::Float(b)) if a.len() == b.len() => {
                a.iter_mut()
                    .zip(b)
                    .for_each(|(x, y)| x.extend_from_slice(y));
            }
            _ => {
                return Err(Error::Incompatible(
                    "Spearman collectors of different streams".into(),
                ))
            }
        }
        Ok(())
    }

    /// Pass two: the doubled ranks of every stream (`names` name the streams in errors),
    /// which the engine then correlates exactly.
    pub fn ranks(self, names: &[String]) -> Result<Vec<Vec<u64>>> {
        Ok(match &self.columns {
            Columns::Int(cols) => cols
                .iter()
                .map(|c| doubled_ranks(c, |a, b| a.cmp(b)))
                .collect(),
            Columns::Float(cols) => {
                for (i, c) in cols.iter().enumerate() {
                    if let Some(r) = c.iter().position(|v| v.is_nan()) {
                        return Err(Error::BadValue {
                            what: "value".into(),
                            location: format!(
                                "row {} of stream {:?}",
                                r + 1,
                                names.get(i).cloned().unwrap_or_default()
                            ),
                            value: "NaN".into(),
                            expected: "a number (NaN has no rank, so Spearman is undefined)".into(),
                        });
                    }
                }
                cols.iter()
                    .map(|c| doubled_ranks(c, |a, b| a.total_cmp(b)))
                    .collect()
            }
        })
    }
}

/// `2 * rank` of every value (ranks from 1; tied values share their average rank).
pub(crate) fn doubled_ranks<T>(
    values: &[T],
    cmp: impl Fn(&T, &T) -> std::cmp::Ordering,
) -> Vec<u64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| cmp(&values[a], &values[b]));
    let mut ranks = vec![0u64; values.len()];
    let mut s = 0;
    while s < order.len() {
        let mut e = s;
        while e + 1 < order.len() && cmp(&values[order[e + 1]], &values[order[s]]).is_eq() {
            e += 1;
        }
        // Positions s..=e (0-based) share the average of ranks s+1..=e+1; doubled: s + e + 2.
        for &k in &order[s..=e] {
            ranks[k] = (s + e + 2) as u64;
        }
        s = e + 1;
    }
    ranks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_their_average_rank() {
        assert_eq!(
            doubled_ranks(&[10, 30, 20, 30, 5], |a, b| a.cmp(b)),
            vec![4, 9, 6, 9, 2]
        );
        assert_eq!(
            doubled_ranks(&[1.0, 1.0, 1.0], |a: &f64, b| a.total_cmp(b)),
            vec![4, 4, 4]
        );
        assert!(doubled_ranks::<i32>(&[], |a, b| a.cmp(b)).is_empty());
    }
}
