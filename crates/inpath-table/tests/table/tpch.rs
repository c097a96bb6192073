//! TPC-H at SF 0.01: the tables hold exactly what tpchgen-arrow generates.

use crate::common::*;
use arrow_array::RecordBatch;
use inpath_table::tpch::{tpch_batches, tpch_schema};
use inpath_table::{generate_tpch, GenOptions, TableReader, WriteOptions, TPCH_TABLES};

/// Rows per table at SF 0.01 as tpchgen makes them (lineitem is 60,175 rows at this scale).
const ROWS: [(&str, u64); 8] = [
    ("lineitem", 60_175),
    ("orders", 15_000),
    ("customer", 1_500),
    ("part", 2_000),
    ("partsupp", 8_000),
    ("supplier", 100),
    ("nation", 25),
    ("region", 5),
];

#[test]
fn sf_001_matches_tpchgen_column_by_column() {
    let dir = tempfile::tempdir().unwrap();
    let (_, seal) = tiers()[4];
    // Small parts and rows per page so that parallel generation and many pages are exercised.
    let options = GenOptions {
        write: WriteOptions {
            rows_per_page: 8192,
            ..options(8192, seal)
        },
        threads: 3,
        part_rows: 7000,
        rows_written: Some(Default::default()),
        ..GenOptions::default()
    };
    let summaries = generate_tpch(0.01, dir.path(), &options).unwrap();
    // The progress counter saw every row written.
    let counted = options
        .rows_written
        .as_ref()
        .unwrap()
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(counted, summaries.iter().map(|s| s.rows).sum::<u64>());
    assert_eq!(
        summaries
            .iter()
            .map(|s| s.table.as_str())
            .collect::<Vec<_>>(),
        TPCH_TABLES
    );
    for ((name, rows), summary) in ROWS.iter().zip(&summaries) {
        assert_eq!(summary.rows, *rows, "{name}");
        let reader = TableReader::open(&dir.path().join(name), &ring()).unwrap();
        assert_eq!(reader.row_count(), *rows, "{name}");
        // The schema is tpchgen's (strings read back as Utf8).
        let theirs = tpch_schema(name).unwrap();
        for (ours, t) in reader.schema().fields().iter().zip(theirs.fields()) {
            assert_eq!(ours.name(), t.name());
            if t.data_type() != &arrow_schema::DataType::Utf8View {
                assert_eq!(ours.data_type(), t.data_type(), "{name}.{}", t.name());
            }
        }
        // Every value equals tpchgen's own batches, generated in one part.
        let mut expected: Vec<Vec<Option<String>>> = vec![Vec::new(); theirs.fields().len()];
        for batch in tpch_batches(name, 0.01, 1, 1).unwrap() {
            let batch: RecordBatch = batch.unwrap();
            for (c, v) in batch_values(&batch).into_iter().enumerate() {
                expected[c].extend(v);
            }
        }
        let got = read_all(&dir.path().join(name), &ring());
        for (c, field) in theirs.fields().iter().enumerate() {
            assert!(got[c] == expected[c], "{name}.{} differs", field.name());
        }
    }
    // The directory holds the eight tables and nothing else (no staging left over).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = TPCH_TABLES.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

/// A cancel stops generation before its next batch: the table being written is removed (no
/// directory, no staging directory), [`inpath_table::Error::Interrupted`] names it, and a
/// table finished before stays.
#[test]
fn a_cancelled_generation_removes_the_table_it_was_writing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let options = GenOptions {
        cancel: Some(cancel.clone()),
        ..GenOptions::default()
    };
    inpath_table::tpch::generate_table("region", 0.01, dir.path(), &options).unwrap();
    cancel.store(true, Ordering::Relaxed);
    let e = inpath_table::tpch::generate_table("lineitem", 0.01, dir.path(), &options).unwrap_err();
    assert!(
        matches!(&e, inpath_table::Error::Interrupted { table } if table == "lineitem"),
        "{e}"
    );
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["region".to_string()]);
    // The estimates the CLI checks free space and progress against.
    assert_eq!(inpath_table::tpch::estimated_rows(1.0), 8_660_050);
    let sf1 = inpath_table::tpch::estimated_bytes(1.0);
    assert!((490e6..520e6).contains(&sf1), "{sf1}");
}
