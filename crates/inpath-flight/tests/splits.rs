//! `inpath.splits` over tables written here: the column chosen, the ranges' order and
//! coverage, and the refusals.

use arrow_array::{Date32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use inpath_flight::splits::splits;
use inpath_seal::KeyRing;
use inpath_table::reader::TableReader;
use inpath_table::writer::{TableWriter, WriteOptions};
use std::sync::Arc;

/// A table of `rows` rows, 100 a page: `noise` (unordered integers) then `day` (ascending
/// dates, four rows a day, so a day may span a page boundary).
fn table(dir: &std::path::Path, rows: i64) -> TableReader {
    let schema = Arc::new(Schema::new(vec![
        Field::new("noise", DataType::Int64, false),
        Field::new("day", DataType::Date32, false),
    ]));
    let options = WriteOptions {
        rows_per_page: 100,
        ..WriteOptions::default()
    };
    let path = dir.join("t");
    let mut w = TableWriter::create(&path, schema.clone(), options).unwrap();
    let noise = Int64Array::from_iter_values((0..rows).map(|i| (i * 7919) % 1000));
    let day = Date32Array::from_iter_values((0..rows).map(|i| 9000 + (i / 4) as i32));
    w.write(&RecordBatch::try_new(schema, vec![Arc::new(noise), Arc::new(day)]).unwrap())
        .unwrap();
    w.finish().unwrap();
    TableReader::open(&path, &KeyRing::new()).unwrap()
}

#[test]
fn ranges_follow_the_first_ordered_column_and_cover_every_page() {
    let dir = tempfile::tempdir().unwrap();
    let reader = table(dir.path(), 1_000);
    let s = splits(&reader, 3).unwrap();
    // `noise` is not in page order; `day` is.
    assert_eq!(s.column.as_deref(), Some("day"));
    assert_eq!(s.kind, Some("date"));
    assert!(!s.nullable);
    assert_eq!((s.pages, s.rows), (10, 1_000));
    assert_eq!(s.splits.len(), 3);
    assert_eq!(s.splits.iter().map(|p| p.pages).sum::<usize>(), 10);
    assert_eq!(s.splits.iter().map(|p| p.rows).sum::<u64>(), 1_000);
    assert_eq!(s.splits[0].lo, None);
    assert_eq!(s.splits[2].hi, None);
    // Each range ends where the next begins; bounds are days as text, ascending.
    for w in s.splits.windows(2) {
        assert_eq!(w[0].hi, w[1].lo);
    }
    let bounds: Vec<String> = s.splits[1..]
        .iter()
        .map(|p| p.lo.as_ref().unwrap().as_str().unwrap().to_string())
        .collect();
    // Pages 3 and 6 start at rows 300 and 600: days 9000 + 75 and 9000 + 150.
    assert_eq!(bounds, ["1994-11-06", "1995-01-20"]);
}

#[test]
fn more_parts_than_pages_give_one_range_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let reader = table(dir.path(), 1_000);
    let s = splits(&reader, 64).unwrap();
    assert_eq!(s.splits.len(), 10);
    assert!(s.splits.iter().all(|p| p.pages == 1 && p.rows == 100));
}

#[test]
fn one_part_or_one_page_is_one_range_without_a_column() {
    let dir = tempfile::tempdir().unwrap();
    let reader = table(dir.path(), 1_000);
    let s = splits(&reader, 1).unwrap();
    assert_eq!((s.column.as_deref(), s.splits.len()), (None, 1));
    let small = tempfile::tempdir().unwrap();
    let reader = table(small.path(), 80);
    let s = splits(&reader, 4).unwrap();
    assert_eq!((s.column.as_deref(), s.splits.len()), (None, 1));
    assert_eq!(s.splits[0].rows, 80);
}

#[test]
fn a_part_count_out_of_range_is_refused_with_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let reader = table(dir.path(), 1_000);
    for bad in [0, 4097] {
        let e = splits(&reader, bad).unwrap_err();
        assert!(e.contains("1 to 4096"), "{e}");
    }
}
