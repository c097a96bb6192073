//! Shared helpers: a batch of every type with a chosen null pattern, the seal tiers, writing
//! and reading tables back, TPC-H generation. inpath-query's and inpath-offload's tests
//! include this file too (`#[path]`), so every crate's tests build their tables alike.
#![allow(dead_code)]

use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array,
    Int64Array, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
use inpath_table::{TableReader, TableWriter, WriteOptions};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;

/// Which rows are null.
#[derive(Clone, Copy, Debug)]
pub enum Nulls {
    None,
    All,
    Alternating,
    Random(u64),
}

impl Nulls {
    pub fn mask(self, n: usize) -> Vec<bool> {
        match self {
            Nulls::None => vec![true; n],
            Nulls::All => vec![false; n],
            Nulls::Alternating => (0..n).map(|i| i % 2 == 0).collect(),
            Nulls::Random(seed) => {
                let mut r = rand::rngs::StdRng::seed_from_u64(seed);
                (0..n).map(|_| r.gen_bool(0.7)).collect()
            }
        }
    }
}

/// A batch with one column of every stored type (values at the types' extremes mixed in);
/// every column nullable unless `nulls` is `None`.
pub fn every_type(n: usize, nulls: Nulls, seed: u64) -> RecordBatch {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let mask = nulls.mask(n);
    let nullable = !matches!(nulls, Nulls::None);
    fn pick<T>(mask: &[bool], i: usize, v: T) -> Option<T> {
        if mask[i] {
            Some(v)
        } else {
            None
        }
    }
    fn extreme<T>(i: usize, lo: T, hi: T, v: T) -> T {
        match i % 97 {
            0 => lo,
            1 => hi,
            _ => v,
        }
    }
    let i32s: Vec<i32> = (0..n)
        .map(|i| extreme(i, i32::MIN, i32::MAX, r.gen()))
        .collect();
    let i64s: Vec<i64> = (0..n)
        .map(|i| extreme(i, i64::MIN, i64::MAX, r.gen_range(-1000..1000)))
        .collect();
    let dates: Vec<i32> = (0..n).map(|i| 8000 + (i as i32 % 2500)).collect();
    let decs: Vec<i128> = (0..n)
        .map(|i| {
            extreme(
                i,
                -999_999_999_999_999,
                999_999_999_999_999,
                r.gen_range(-100_000..10_000_000),
            )
        })
        .collect();
    let wide: Vec<i128> = (0..n)
        .map(|i| extreme(i, -(10i128.pow(38) - 1), 10i128.pow(38) - 1, r.gen()))
        .collect::<Vec<i128>>()
        .into_iter()
        .map(|v| v % (10i128.pow(38) - 1))
        .collect();
    let floats: Vec<f64> = (0..n)
        .map(|i| match i % 53 {
            0 => f64::INFINITY,
            1 => f64::NEG_INFINITY,
            2 => -0.0,
            3 => f64::MIN_POSITIVE,
            _ => r.gen_range(-1e6..1e6),
        })
        .collect();
    let words = [
        "AIR", "MAIL", "RAIL", "SHIP", "TRUCK", "", "FOB", "REG AIR", "é ü",
    ];
    let low: Vec<String> = (0..n).map(|i| words[i % words.len()].to_string()).collect();
    let high: Vec<String> = (0..n)
        .map(|i| format!("comment {} {}", i, r.gen::<u32>()))
        .collect();
    let bools: Vec<bool> = (0..n).map(|_| r.gen()).collect();
    let cols: Vec<(&str, ArrayRef, DataType)> = vec![
        (
            "i32",
            Arc::new(Int32Array::from_iter(
                (0..n).map(|i| pick(&mask, i, i32s[i])),
            )),
            DataType::Int32,
        ),
        (
            "i64",
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| pick(&mask, i, i64s[i])),
            )),
            DataType::Int64,
        ),
        (
            "date",
            Arc::new(Date32Array::from_iter(
                (0..n).map(|i| pick(&mask, i, dates[i])),
            )),
            DataType::Date32,
        ),
        (
            "dec",
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|i| pick(&mask, i, decs[i])))
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            DataType::Decimal128(15, 2),
        ),
        (
            "wide",
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|i| pick(&mask, i, wide[i])))
                    .with_precision_and_scale(38, 4)
                    .unwrap(),
            ),
            DataType::Decimal128(38, 4),
        ),
        (
            "f64",
            Arc::new(Float64Array::from_iter(
                (0..n).map(|i| pick(&mask, i, floats[i])),
            )),
            DataType::Float64,
        ),
        (
            "low",
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| pick(&mask, i, low[i].clone())),
            )),
            DataType::Utf8,
        ),
        (
            "high",
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| pick(&mask, i, high[i].clone())),
            )),
            DataType::Utf8,
        ),
        (
            "bool",
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| pick(&mask, i, bools[i])),
            )),
            DataType::Boolean,
        ),
    ];
    let fields: Vec<Field> = cols
        .iter()
        .map(|(name, _, t)| Field::new(*name, t.clone(), nullable))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols.into_iter().map(|c| c.1).collect(),
    )
    .unwrap()
}

pub fn key() -> Key {
    Key::new(&[0x5a; 32]).unwrap()
}

pub fn ring() -> KeyRing {
    let mut ring = KeyRing::new();
    ring.insert(3, key());
    ring
}

/// The five tiers of the brief: plain, lz4, zstd, ctr, gcm.
pub fn tiers() -> Vec<(&'static str, SealConfig)> {
    let c = |compression, cipher| SealConfig {
        compression,
        cipher,
    };
    vec![
        ("plain", c(Compression::None, Cipher::None)),
        ("lz4", c(Compression::Lz4, Cipher::None)),
        ("zstd", c(Compression::Zstd(3), Cipher::None)),
        ("ctr", c(Compression::Lz4, Cipher::Ctr)),
        ("gcm", c(Compression::Zstd(1), Cipher::Gcm)),
    ]
}

pub fn options(rows_per_page: usize, seal: SealConfig) -> WriteOptions {
    WriteOptions {
        rows_per_page,
        seal,
        key: (seal.cipher != Cipher::None).then(|| (3, key())),
        nonce_prefix: Some([9; 8]),
        ..WriteOptions::default()
    }
}

/// Writes `batch` to `dir` in chunks of `chunk` rows.
pub fn write(dir: &Path, batch: &RecordBatch, chunk: usize, options: WriteOptions) {
    let mut w = TableWriter::create(dir, batch.schema(), options).unwrap();
    let mut at = 0;
    while at < batch.num_rows() {
        let take = chunk.min(batch.num_rows() - at);
        w.write(&batch.slice(at, take)).unwrap();
        at += take;
    }
    w.finish().unwrap();
}

/// Every page of every column, concatenated per column, as (is_valid, debug string of value).
pub fn read_all(dir: &Path, keys: &KeyRing) -> Vec<Vec<Option<String>>> {
    let reader = TableReader::open(dir, keys).unwrap();
    let mut out = vec![Vec::new(); reader.schema().fields().len()];
    let all: Vec<usize> = (0..reader.schema().fields().len()).collect();
    let pages: Vec<usize> = (0..reader.page_count()).collect();
    for batch in reader.scan(&all, &pages).unwrap() {
        let batch = batch.unwrap();
        for (c, col) in batch.columns().iter().enumerate() {
            out[c].extend(values(col.as_ref()));
        }
    }
    out
}

/// A column's values as strings (None for null), whatever its Arrow type.
pub fn values(array: &dyn Array) -> Vec<Option<String>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    (0..array.len())
        .map(|i| {
            if array.is_null(i) {
                return None;
            }
            Some(match array.data_type() {
                DataType::Int32 => array.as_primitive::<Int32Type>().value(i).to_string(),
                DataType::Int64 => array.as_primitive::<Int64Type>().value(i).to_string(),
                DataType::Date32 => array.as_primitive::<Date32Type>().value(i).to_string(),
                DataType::Decimal128(_, _) => {
                    array.as_primitive::<Decimal128Type>().value(i).to_string()
                }
                DataType::Float64 => format!(
                    "{:?}",
                    array.as_primitive::<Float64Type>().value(i).to_bits()
                ),
                DataType::Utf8 => array.as_string::<i32>().value(i).to_string(),
                DataType::Utf8View => array.as_string_view().value(i).to_string(),
                DataType::Boolean => array.as_boolean().value(i).to_string(),
                t => panic!("unexpected type {t}"),
            })
        })
        .collect()
}

pub fn batch_values(batch: &RecordBatch) -> Vec<Vec<Option<String>>> {
    batch.columns().iter().map(|c| values(c.as_ref())).collect()
}

/// All files of a table directory, by name.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Asserts two tables' files are byte-identical, naming the first difference (not the bytes).
pub fn assert_same_files(a: &Path, b: &Path, what: &str) {
    let (fa, fb) = (files(a), files(b));
    let names = |f: &[(String, Vec<u8>)]| f.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&fa), names(&fb), "{what}: file names");
    for ((name, x), (_, y)) in fa.iter().zip(&fb) {
        if x != y {
            let at = x
                .iter()
                .zip(y)
                .position(|(p, q)| p != q)
                .unwrap_or(x.len().min(y.len()));
            panic!(
                "{what}: {name} differs at byte {at} (lengths {} and {})",
                x.len(),
                y.len()
            );
        }
    }
}

/// TPC-H at `sf` into `dir` with the given tier and page size (2 threads).
pub fn gen(dir: &Path, sf: f64, seal: SealConfig, rows_per_page: usize) {
    let options = inpath_table::GenOptions {
        write: WriteOptions {
            rows_per_page,
            seal,
            key: (seal.cipher != Cipher::None).then(|| (3, key())),
            ..WriteOptions::default()
        },
        threads: 2,
        ..inpath_table::GenOptions::default()
    };
    inpath_table::generate_tpch(sf, dir, &options).unwrap();
}

/// Plain pages: no compression, no cipher.
pub fn plain() -> SealConfig {
    SealConfig {
        compression: Compression::None,
        cipher: Cipher::None,
    }
}

/// Sealed pages: LZ4 heaps and AES-256-GCM records.
pub fn lz4_gcm() -> SealConfig {
    SealConfig {
        compression: Compression::Lz4,
        cipher: Cipher::Gcm,
    }
}

/// Writes `batch` as table `t` under `dir` in pages of `rows_per_page` rows; returns its path.
pub fn write_t(dir: &Path, batch: &RecordBatch, rows_per_page: usize) -> std::path::PathBuf {
    let table = dir.join("t");
    let mut w = TableWriter::create(
        &table,
        batch.schema(),
        WriteOptions {
            rows_per_page,
            ..WriteOptions::default()
        },
    )
    .unwrap();
    w.write(batch).unwrap();
    w.finish().unwrap();
    table
}

/// A table with random decimals, dates, integers and two dictionary strings, written in small
/// pages.
pub fn random_table(dir: &Path, rows: usize, seed: u64) -> RecordBatch {
    let mut r = rand::rngs::StdRng::seed_from_u64(seed);
    let price: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..rows).map(|_| r.gen_range(-100_000i128..1_000_000)))
            .with_precision_and_scale(15, 2)
            .unwrap(),
    );
    let disc: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..rows).map(|_| r.gen_range(0i128..=10)))
            .with_precision_and_scale(15, 2)
            .unwrap(),
    );
    let day: ArrayRef = Arc::new(Date32Array::from_iter_values(
        (0..rows).map(|_| r.gen_range(8000..11000)),
    ));
    let qty: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..rows).map(|_| r.gen_range(-50..50)),
    ));
    let flags = ["A", "N", "R"];
    let flag: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..rows).map(|_| flags[r.gen_range(0..3)]),
    ));
    // Many groups: enough to spill under a small budget.
    let name: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..rows).map(|_| format!("name {:04}", r.gen_range(0..3000))),
    ));
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("price", arrow_schema::DataType::Decimal128(15, 2), false),
        arrow_schema::Field::new("disc", arrow_schema::DataType::Decimal128(15, 2), false),
        arrow_schema::Field::new("day", arrow_schema::DataType::Date32, false),
        arrow_schema::Field::new("qty", arrow_schema::DataType::Int64, false),
        arrow_schema::Field::new("flag", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("name", arrow_schema::DataType::Utf8, false),
    ]));
    let batch =
        RecordBatch::try_new(schema.clone(), vec![price, disc, day, qty, flag, name]).unwrap();
    write_t(dir, &batch, 1000);
    batch
}
