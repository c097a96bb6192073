//! Import of Parquet and CSV files (no SQL engine): every stored type and null pattern
//! round-trips through Parquet, types narrow as documented, CSV types are inferred, and a type
//! the format cannot hold, a value that does not fit, or a file of another kind is refused with
//! nothing left behind.

use crate::common::*;
use arrow_array::{
    ArrayRef, Date64Array, Float32Array, Int16Array, Int8Array, RecordBatch, TimestampSecondArray,
    UInt32Array, UInt64Array,
};
use arrow_schema::DataType;
use inpath_seal::KeyRing;
use inpath_table::{import_file, TableReader, WriteOptions};
use std::path::Path;
use std::sync::Arc;

fn write_parquet(path: &Path, batch: &RecordBatch, rows_per_group: usize) {
    let file = std::fs::File::create(path).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(rows_per_group))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

fn stored_types(dir: &Path) -> Vec<DataType> {
    let reader = TableReader::open(dir, &KeyRing::new()).unwrap();
    reader
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect()
}

#[test]
fn parquet_round_trips_every_type_and_null_pattern() {
    let dir = tempfile::tempdir().unwrap();
    for (k, nulls) in [Nulls::None, Nulls::Alternating, Nulls::Random(5)]
        .into_iter()
        .enumerate()
    {
        let batch = every_type(2500, nulls, 40 + k as u64);
        let file = dir.path().join(format!("t{k}.parquet"));
        // Row groups that do not line up with the table's pages.
        write_parquet(&file, &batch, 700);
        let table = dir.path().join(format!("t{k}"));
        let options = WriteOptions {
            rows_per_page: 1000,
            ..WriteOptions::default()
        };
        let s = import_file(&file, &table, options).unwrap();
        assert_eq!((s.rows, s.pages), (2500, 3), "{nulls:?}");
        assert_eq!(
            read_all(&table, &KeyRing::new()),
            batch_values(&batch),
            "{nulls:?}"
        );
    }
}

#[test]
fn narrow_types_are_stored_wide_and_values_kept() {
    let dir = tempfile::tempdir().unwrap();
    let n = 300;
    let cols: Vec<(&str, ArrayRef)> = vec![
        (
            "i8",
            Arc::new(Int8Array::from_iter_values((0..n).map(|i| (i % 250) as i8))),
        ),
        (
            "i16",
            Arc::new(Int16Array::from_iter_values((0..n).map(|i| i as i16 * -7))),
        ),
        (
            "u32",
            Arc::new(UInt32Array::from_iter_values(
                (0..n).map(|i| u32::MAX - i as u32),
            )),
        ),
        (
            "u64",
            Arc::new(UInt64Array::from_iter_values(
                (0..n).map(|i| i as u64 * 1000),
            )),
        ),
        (
            "f32",
            Arc::new(Float32Array::from_iter_values(
                (0..n).map(|i| i as f32 / 4.0),
            )),
        ),
        (
            "d64",
            Arc::new(Date64Array::from_iter_values(
                (0..n).map(|i| i as i64 * 86_400_000),
            )),
        ),
    ];
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let file = dir.path().join("narrow.parquet");
    write_parquet(&file, &batch, 128);
    let table = dir.path().join("narrow");
    import_file(&file, &table, WriteOptions::default()).unwrap();
    assert_eq!(
        stored_types(&table),
        [
            DataType::Int32,
            DataType::Int32,
            DataType::Int64,
            DataType::Int64,
            DataType::Float64,
            DataType::Date32
        ]
    );
    let back = read_all(&table, &KeyRing::new());
    let want = |f: &dyn Fn(usize) -> String| (0..n).map(|i| Some(f(i))).collect::<Vec<_>>();
    assert_eq!(back[0], want(&|i| ((i % 250) as i8).to_string()));
    assert_eq!(back[1], want(&|i| (i as i16 * -7).to_string()));
    assert_eq!(back[2], want(&|i| (u32::MAX - i as u32).to_string()));
    assert_eq!(back[3], want(&|i| (i * 1000).to_string()));
    // Quarters are exact in both widths.
    assert_eq!(
        back[4],
        want(&|i| format!("{:?}", (i as f64 / 4.0).to_bits()))
    );
    assert_eq!(back[5], want(&|i| i.to_string()));
}

#[test]
fn csv_types_are_inferred_and_quoted_fields_kept() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("people.csv");
    std::fs::write(
        &csv,
        "id,name,score,day,ok\n1,ann,2.5,2024-01-31,true\n2,bob,,2024-02-01,false\n\
         3,\"c, d\",4,2024-02-29,true\n",
    )
    .unwrap();
    let table = dir.path().join("people");
    let s = import_file(&csv, &table, WriteOptions::default()).unwrap();
    assert_eq!(s.rows, 3);
    assert_eq!(
        stored_types(&table),
        [
            DataType::Int64,
            DataType::Utf8,
            DataType::Float64,
            DataType::Date32,
            DataType::Boolean
        ]
    );
    let back = read_all(&table, &KeyRing::new());
    let bits = |x: f64| Some(format!("{:?}", x.to_bits()));
    assert_eq!(
        back[0],
        [Some("1".into()), Some("2".into()), Some("3".into())]
    );
    assert_eq!(
        back[1],
        [Some("ann".into()), Some("bob".into()), Some("c, d".into())]
    );
    assert_eq!(back[2], [bits(2.5), None, bits(4.0)]);
    // Days since 1970-01-01.
    assert_eq!(
        back[3],
        [
            Some("19753".into()),
            Some("19754".into()),
            Some("19782".into())
        ]
    );
    assert_eq!(
        back[4],
        [
            Some("true".into()),
            Some("false".into()),
            Some("true".into())
        ]
    );
}

#[test]
fn bad_imports_name_the_problem_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A type the format cannot hold: named with its column, nothing written.
    let stamps = dir.path().join("stamps.csv");
    std::fs::write(&stamps, "at\n2024-01-01T00:00:00\n2024-01-02T00:00:00\n").unwrap();
    let e = import_file(&stamps, &dir.path().join("stamps"), WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("column at") && e.contains("Timestamp"), "{e}");
    assert!(!dir.path().join("stamps").exists());
    let ts: ArrayRef = Arc::new(TimestampSecondArray::from_iter_values([1, 2, 3]));
    let batch = RecordBatch::try_from_iter([("t", ts)]).unwrap();
    let file = dir.path().join("ts.parquet");
    write_parquet(&file, &batch, 10);
    let e = import_file(&file, &dir.path().join("ts"), WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("column t") && e.contains("Timestamp"), "{e}");
    assert!(!dir.path().join("ts").exists());

    // An unsigned value above 2^63 - 1: an error naming the column, never a wrapped number.
    let big: ArrayRef = Arc::new(UInt64Array::from(vec![1, u64::MAX]));
    let batch = RecordBatch::try_from_iter([("big", big)]).unwrap();
    let file = dir.path().join("big.parquet");
    write_parquet(&file, &batch, 10);
    let e = import_file(&file, &dir.path().join("big"), WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("column big"), "{e}");
    assert!(!dir.path().join("big").exists());

    // A CSV row that does not parse as the inferred type.
    let bad = dir.path().join("bad.csv");
    let mut text = String::from("n\n");
    for i in 0..1500 {
        text.push_str(&format!("{i}\n"));
    }
    text.push_str("not a number\n");
    std::fs::write(&bad, text).unwrap();
    let e = import_file(&bad, &dir.path().join("bad"), WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.csv"), "{e}");
    assert!(!dir.path().join("bad").exists());

    // Not a Parquet file, another extension, a missing file.
    let fake = dir.path().join("fake.parquet");
    std::fs::write(&fake, b"PAR1 but not really").unwrap();
    let e = import_file(&fake, &dir.path().join("fake"), WriteOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("fake.parquet"), "{e}");
    let e = import_file(
        &dir.path().join("x.txt"),
        &dir.path().join("x"),
        WriteOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains(".parquet or .csv"), "{e}");
    let e = import_file(
        &dir.path().join("missing.csv"),
        &dir.path().join("m"),
        WriteOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing.csv"), "{e}");
}
