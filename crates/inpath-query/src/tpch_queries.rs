//! The 22 TPC-H queries shipped with the crate, their pinned answers, and the comparison of a
//! result with an answer.
//!
//! Answers were pinned by `tpch/pin_answers.py` from DuckDB over `tpchgen-cli` 4.0 Parquet
//! (the generator `inpath query gen` uses). A result matches when it has the same columns and
//! rows in the same order and every value agrees: integers, dates, strings and decimals
//! exactly; floats (averages, ratios) to 1e-9 relative. Where DuckDB answers a double and
//! DataFusion a decimal (a decimal divided by a decimal), the two agree to one unit in the
//! decimal's last place or 1e-9 relative, whichever is looser.

use crate::sql::QueryResult;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

/// The query texts; `QUERIES[0]` is Q1.
pub const QUERIES: [&str; 22] = [
    include_str!("../tpch/queries/q01.sql"),
    include_str!("../tpch/queries/q02.sql"),
    include_str!("../tpch/queries/q03.sql"),
    include_str!("../tpch/queries/q04.sql"),
    include_str!("../tpch/queries/q05.sql"),
    include_str!("../tpch/queries/q06.sql"),
    include_str!("../tpch/queries/q07.sql"),
    include_str!("../tpch/queries/q08.sql"),
    include_str!("../tpch/queries/q09.sql"),
    include_str!("../tpch/queries/q10.sql"),
    include_str!("../tpch/queries/q11.sql"),
    include_str!("../tpch/queries/q12.sql"),
    include_str!("../tpch/queries/q13.sql"),
    include_str!("../tpch/queries/q14.sql"),
    include_str!("../tpch/queries/q15.sql"),
    include_str!("../tpch/queries/q16.sql"),
    include_str!("../tpch/queries/q17.sql"),
    include_str!("../tpch/queries/q18.sql"),
    include_str!("../tpch/queries/q19.sql"),
    include_str!("../tpch/queries/q20.sql"),
    include_str!("../tpch/queries/q21.sql"),
    include_str!("../tpch/queries/q22.sql"),
];

/// Answers pinned at one scale factor.
#[derive(Debug)]
pub struct Pinned {
    /// The scale factor.
    pub sf: f64,
    /// Rows per table at that scale (the tables' row counts tell a directory's scale).
    pub rows: [(&'static str, u64); 8],
    /// The answers as CSV with a header row; `answers[0]` is Q1.
    pub answers: [&'static str; 22],
}

/// The answers that ship: SF 0.01 and SF 0.1.
pub const PINNED: [Pinned; 2] = [
    Pinned {
        sf: 0.01,
        rows: [
            ("customer", 1500),
            ("lineitem", 60175),
            ("nation", 25),
            ("orders", 15000),
            ("part", 2000),
            ("partsupp", 8000),
            ("region", 5),
            ("supplier", 100),
        ],
        answers: [
            include_str!("../tpch/answers/sf0.01/q01.csv"),
            include_str!("../tpch/answers/sf0.01/q02.csv"),
            include_str!("../tpch/answers/sf0.01/q03.csv"),
            include_str!("../tpch/answers/sf0.01/q04.csv"),
            include_str!("../tpch/answers/sf0.01/q05.csv"),
            include_str!("../tpch/answers/sf0.01/q06.csv"),
            include_str!("../tpch/answers/sf0.01/q07.csv"),
            include_str!("../tpch/answers/sf0.01/q08.csv"),
            include_str!("../tpch/answers/sf0.01/q09.csv"),
            include_str!("../tpch/answers/sf0.01/q10.csv"),
            include_str!("../tpch/answers/sf0.01/q11.csv"),
            include_str!("../tpch/answers/sf0.01/q12.csv"),
            include_str!("../tpch/answers/sf0.01/q13.csv"),
            include_str!("../tpch/answers/sf0.01/q14.csv"),
            include_str!("../tpch/answers/sf0.01/q15.csv"),
            include_str!("../tpch/answers/sf0.01/q16.csv"),
            include_str!("../tpch/answers/sf0.01/q17.csv"),
            include_str!("../tpch/answers/sf0.01/q18.csv"),
            include_str!("../tpch/answers/sf0.01/q19.csv"),
            include_str!("../tpch/answers/sf0.01/q20.csv"),
            include_str!("../tpch/answers/sf0.01/q21.csv"),
            include_str!("../tpch/answers/sf0.01/q22.csv"),
        ],
    },
    Pinned {
        sf: 0.1,
        rows: [
            ("customer", 15000),
            ("lineitem", 600572),
            ("nation", 25),
            ("orders", 150000),
            ("part", 20000),
            ("partsupp", 80000),
            ("region", 5),
            ("supplier", 1000),
        ],
        answers: [
            include_str!("../tpch/answers/sf0.1/q01.csv"),
            include_str!("../tpch/answers/sf0.1/q02.csv"),
            include_str!("../tpch/answers/sf0.1/q03.csv"),
            include_str!("../tpch/answers/sf0.1/q04.csv"),
            include_str!("../tpch/answers/sf0.1/q05.csv"),
            include_str!("../tpch/answers/sf0.1/q06.csv"),
            include_str!("../tpch/answers/sf0.1/q07.csv"),
            include_str!("../tpch/answers/sf0.1/q08.csv"),
            include_str!("../tpch/answers/sf0.1/q09.csv"),
            include_str!("../tpch/answers/sf0.1/q10.csv"),
            include_str!("../tpch/answers/sf0.1/q11.csv"),
            include_str!("../tpch/answers/sf0.1/q12.csv"),
            include_str!("../tpch/answers/sf0.1/q13.csv"),
            include_str!("../tpch/answers/sf0.1/q14.csv"),
            include_str!("../tpch/answers/sf0.1/q15.csv"),
            include_str!("../tpch/answers/sf0.1/q16.csv"),
            include_str!("../tpch/answers/sf0.1/q17.csv"),
            include_str!("../tpch/answers/sf0.1/q18.csv"),
            include_str!("../tpch/answers/sf0.1/q19.csv"),
            include_str!("../tpch/answers/sf0.1/q20.csv"),
            include_str!("../tpch/answers/sf0.1/q21.csv"),
            include_str!("../tpch/answers/sf0.1/q22.csv"),
        ],
    },
];

/// The text of query `n` (1 to 22).
pub fn query(n: usize) -> Option<&'static str> {
    QUERIES.get(n.checked_sub(1)?).copied()
}

/// The pinned answer of query `n` at scale factor `sf`, when one ships (SF 0.01 and 0.1).
pub fn pinned_answer(sf: f64, n: usize) -> Option<&'static str> {
    let pinned = PINNED.iter().find(|p| (p.sf - sf).abs() < 1e-12)?;
    pinned.answers.get(n.checked_sub(1)?).copied()
}

/// A decimal text as (digits as an integer, digits after the point), or `None` for anything
/// else (exponents, `inf`, text).
fn parse_decimal(text: &str) -> Option<(i128, u32)> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = body.split_once('.').unwrap_or((body, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole
        .bytes()
        .chain(fraction.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut value: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        value = value.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    Some((if negative { -value } else { value }, fraction.len() as u32))
}

/// Two decimal texts are equal as numbers (`1.50` = `1.5`).
fn decimal_eq(a: (i128, u32), b: (i128, u32)) -> bool {
    let scale = a.1.max(b.1);
    let widen = |(v, s): (i128, u32)| v.checked_mul(10i128.checked_pow(scale - s)?);
    matches!((widen(a), widen(b)), (Some(x), Some(y)) if x == y)
}

fn close(ours: f64, expected: f64, absolute: f64) -> bool {
    if ours == expected {
        return true;
    }
    let diff = (ours - expected).abs();
    diff <= absolute || diff <= 1e-9 * ours.abs().max(expected.abs())
}

/// Whether one value of a result column of type `data_type` agrees with the pinned text.
fn value_matches(data_type: &DataType, ours: &str, expected: &str) -> bool {
    if ours == expected {
        return true;
    }
    match data_type {
        DataType::Decimal128(_, scale) | DataType::Decimal256(_, scale) => {
            if let (Some(a), Some(b)) = (parse_decimal(ours), parse_decimal(expected)) {
                if b.1 <= (*scale).max(0) as u32 {
                    return decimal_eq(a, b);
                }
            }
            // DuckDB answered a double: one unit in our last place, or 1e-9 relative.
            match (ours.parse::<f64>(), expected.parse::<f64>()) {
                (Ok(a), Ok(b)) => close(a, b, 10f64.powi(-(*scale as i32))),
                _ => false,
            }
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            match (ours.parse::<f64>(), expected.parse::<f64>()) {
                (Ok(a), Ok(b)) => close(a, b, 0.0),
                _ => false,
            }
        }
        d if d.is_integer() => match (parse_decimal(ours), parse_decimal(expected)) {
            (Some(a), Some(b)) => decimal_eq(a, b),
            _ => false,
        },
        _ => false,
    }
}

/// The first difference between a result and a pinned answer ([`check_answer`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Mismatch {
    /// The pinned answer is not readable CSV.
    #[error("the pinned answer: {0}")]
    Answer(#[from] csv::Error),
    /// A column of the result cannot be formatted for the comparison.
    #[error("cannot format the result: {0}")]
    Format(#[from] datafusion::arrow::error::ArrowError),
    /// The column counts differ.
    #[error("{} columns ({}), the answer has {} ({})", ours.len(), ours.join(", "), theirs.len(), theirs.join(", "))]
    Columns {
        /// The result's column names.
        ours: Vec<String>,
        /// The answer's column names.
        theirs: Vec<String>,
    },
    /// A column has another name.
    #[error("column {ours} is {theirs} in the answer")]
    ColumnName {
        /// The result's name.
        ours: String,
        /// The answer's name.
        theirs: String,
    },
    /// The row counts differ.
    #[error("{ours} rows, the answer has {theirs}")]
    Rows {
        /// The result's rows.
        ours: usize,
        /// The answer's rows.
        theirs: usize,
    },
    /// A value differs.
    #[error("row {row}, column {column}: {ours:?}, the answer has {theirs:?}")]
    Value {
        /// The row, from 1.
        row: usize,
        /// The column's name.
        column: String,
        /// The result's value as text.
        ours: String,
        /// The answer's value.
        theirs: String,
    },
}

/// Compares a result with a pinned answer (CSV with a header row). The error names the first
/// difference: the column count or names, the row count, or the row, column and both values.
pub fn check_answer(result: &QueryResult, expected_csv: &str) -> Result<(), Mismatch> {
    let mut csv = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(expected_csv.as_bytes());
    let header: Vec<String> = csv.headers()?.iter().map(str::to_string).collect();
    let names: Vec<String> = result
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    if names.len() != header.len() {
        return Err(Mismatch::Columns {
            ours: names,
            theirs: header,
        });
    }
    for (ours, theirs) in names.iter().zip(&header) {
        if !ours.eq_ignore_ascii_case(theirs) {
            return Err(Mismatch::ColumnName {
                ours: ours.clone(),
                theirs: theirs.clone(),
            });
        }
    }
    let expected: Vec<csv::StringRecord> = csv.records().collect::<Result<_, _>>()?;
    if result.row_count() != expected.len() {
        return Err(Mismatch::Rows {
            ours: result.row_count(),
            theirs: expected.len(),
        });
    }
    let options = FormatOptions::default();
    let mut row = 0;
    for batch in &result.batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<_, _>>()?;
        for i in 0..batch.num_rows() {
            for (c, f) in formatters.iter().enumerate() {
                let ours = if batch.column(c).is_null(i) {
                    String::new()
                } else {
                    f.value(i).to_string()
                };
                let theirs = &expected[row][c];
                if !value_matches(batch.column(c).data_type(), &ours, theirs) {
                    return Err(Mismatch::Value {
                        row: row + 1,
                        column: names[c].clone(),
                        ours,
                        theirs: theirs.to_string(),
                    });
                }
            }
            row += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_compare_as_numbers_and_floats_to_1e9() {
        let d = DataType::Decimal128(38, 2);
        assert!(value_matches(&d, "1.50", "1.5"));
        assert!(value_matches(&d, "-0.10", "-0.1"));
        assert!(!value_matches(&d, "1.51", "1.5"));
        // A double answer against a decimal: one unit in the last place.
        assert!(value_matches(&d, "15.49", "15.486545812"));
        assert!(!value_matches(&d, "15.47", "15.486545812"));
        let f = DataType::Float64;
        assert!(value_matches(&f, "25.575154611454693", "25.57515461145469"));
        assert!(!value_matches(&f, "25.575154", "25.575154611454693"));
        assert!(value_matches(&DataType::Int64, "14876", "14876"));
        assert!(!value_matches(&DataType::Int64, "14877", "14876"));
        assert!(!value_matches(&DataType::Utf8, "A", "B"));
    }

    #[test]
    fn every_query_and_answer_ships() {
        for n in 1..=22 {
            assert!(query(n).unwrap().to_lowercase().contains("select"));
            let answer = pinned_answer(0.01, n).unwrap();
            assert!(answer.lines().count() >= 2, "q{n}");
        }
        assert!(query(0).is_none() && query(23).is_none());
        assert!(pinned_answer(1.0, 1).is_none());
    }
}
