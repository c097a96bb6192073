//! Page-range splits of a table: how a client that reads a table in parallel parts (the Spark
//! connector's executors) divides it so that each part reads its own pages.
//!
//! A split is a range of one column's values, `lo <= column < hi`, chosen from the zone maps
//! of a column whose pages are in ascending order (TPC-H's keys: `l_orderkey`, `o_orderkey`,
//! ...): the part's statement carries the range as a predicate, the scan and the device prune
//! every page outside it by zone map, and the parts together hold every row exactly once
//! whatever the data (a predicate partitions the values; the pages only guide where the
//! boundaries fall). A table with no such column, or under two pages, is one split.
//!
//! The action `inpath.splits` answers with [`Splits`] as JSON (docs/FORMATS.md, "Flight
//! actions").

use inpath_table::format::{LogicalType, Scalar};
use inpath_table::reader::TableReader;
use serde::Serialize;

/// A table's splits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Splits {
    /// The table's name.
    pub table: String,
    /// Rows in the table.
    pub rows: u64,
    /// Pages per column.
    pub pages: usize,
    /// The column the ranges are of (`None`: one split, no predicate).
    pub column: Option<String>,
    /// `int` (bounds are JSON integers) or `date` (strings `YYYY-MM-DD`).
    #[serde(rename = "type")]
    pub kind: Option<&'static str>,
    /// Whether the column may hold nulls: a client adds a part `column IS NULL`.
    pub nullable: bool,
    /// The ranges, ascending; the first has no lower bound and the last no upper bound.
    pub splits: Vec<Split>,
}

/// One range: the rows with `lo <= column < hi`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Split {
    /// The lower bound, inclusive (`None`: none).
    pub lo: Option<serde_json::Value>,
    /// The upper bound, exclusive (`None`: none).
    pub hi: Option<serde_json::Value>,
    /// Pages whose rows the range holds (by zone map; a key spanning a page boundary belongs
    /// to the range of its later page).
    pub pages: usize,
    /// Rows in those pages.
    pub rows: u64,
}

/// The most parts a client may ask for.
pub const MAX_PARTS: usize = 4096;

/// Splits `reader`'s table into at most `parts` ranges of about equal pages (1 to
/// [`MAX_PARTS`]).
pub fn splits(reader: &TableReader, parts: usize) -> Result<Splits, String> {
    if parts == 0 || parts > MAX_PARTS {
        return Err(format!(
            "parts {parts}: 1 to {MAX_PARTS} (the number of ranges to split the table into)"
        ));
    }
    let manifest = reader.manifest();
    let pages = reader.page_count();
    let whole = |column: Option<String>, kind, nullable| Splits {
        table: reader.table().to_string(),
        rows: reader.row_count(),
        pages,
        column,
        kind,
        nullable,
        splits: vec![Split {
            lo: None,
            hi: None,
            pages,
            rows: reader.row_count(),
        }],
    };
    let Some((index, kind)) = sorted_column(reader) else {
        return Ok(whole(None, None, false));
    };
    let meta = &manifest.columns[index];
    let nullable = meta.nullable || meta.pages.iter().any(|p| p.null_count > 0);
    if parts == 1 || pages < 2 {
        return Ok(whole(None, None, false));
    }
    // Part k starts at page k * pages / parts; its lower bound is that page's smallest value.
    // Equal bounds (one key over several pages) merge their parts.
    let mut starts: Vec<(usize, i128)> = Vec::new();
    for k in 0..parts.min(pages) {
        let page = k * pages / parts.min(pages);
        let Some(Scalar::Int(lo)) = &meta.pages[page].min else {
            continue;
        };
        match starts.last() {
            Some((_, last)) if *last >= *lo => {}
            _ => starts.push((page, *lo)),
        }
    }
    if starts.len() < 2 {
        return Ok(whole(None, None, false));
    }
    let value = |v: i128| match kind {
        "date" => date_text(v)
            .map(serde_json::Value::String)
            .unwrap_or(serde_json::Value::Null),
        _ => serde_json::Value::from(v as i64),
    };
    let mut out = Vec::with_capacity(starts.len());
    for (i, &(page, lo)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(pages, |&(p, _)| p);
        let rows = (page..end).map(|p| manifest.page_rows(p) as u64).sum();
        out.push(Split {
            lo: (i > 0).then(|| value(lo)),
            hi: starts.get(i + 1).map(|&(_, hi)| value(hi)),
            pages: end - page,
            rows,
        });
    }
    Ok(Splits {
        table: reader.table().to_string(),
        rows: reader.row_count(),
        pages,
        column: Some(meta.name.clone()),
        kind: Some(kind),
        nullable,
        splits: out,
    })
}

/// The first integer or date column whose pages' zone maps ascend (each page's largest value
/// at most the next page's smallest), and its kind.
fn sorted_column(reader: &TableReader) -> Option<(usize, &'static str)> {
    let manifest = reader.manifest();
    manifest.columns.iter().enumerate().find_map(|(i, c)| {
        let kind = match c.logical {
            LogicalType::Int32 | LogicalType::Int64 => "int",
            LogicalType::Date32 => "date",
            _ => return None,
        };
        let mut last: Option<i128> = None;
        for p in &c.pages {
            let (Some(Scalar::Int(lo)), Some(Scalar::Int(hi))) = (&p.min, &p.max) else {
                // A page of nulls only: no order to follow.
                return None;
            };
            if last.is_some_and(|l| l > *lo) {
                return None;
            }
            last = Some(*hi);
        }
        Some((i, kind))
    })
}

/// Days since 1970-01-01 as `YYYY-MM-DD`.
fn date_text(days: i128) -> Option<String> {
    let days = i32::try_from(days).ok()?;
    datafusion::arrow::temporal_conversions::date32_to_datetime(days)
        .map(|t| t.date().format("%Y-%m-%d").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_iso_days() {
        assert_eq!(date_text(0).as_deref(), Some("1970-01-01"));
        assert_eq!(date_text(9_204).as_deref(), Some("1995-03-15"));
        assert_eq!(date_text(-1).as_deref(), Some("1969-12-31"));
    }
}
