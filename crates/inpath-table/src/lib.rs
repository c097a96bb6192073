//! # inpath-table
//!
//! The storage side of AQUOMAN (reference 001, part II): a **row-aligned column format whose
//! every page is one `inpath-seal` record**, TPC-H generation into it and Parquet/CSV import.
//! Arrow only: the offload device (`inpath-offload`) and the SQL host (`inpath-query`, Apache
//! DataFusion) read tables through this crate.
//!
//! - A table is a directory: a `manifest` (schema, rows per page R, per-page zone maps,
//!   dictionaries; sealed in the encrypted tiers) and one file per column (`0.col`, `1.col`...).
//! - Page k of every column holds rows [kR, (k+1)R), so a row id maps to (page, offset) by
//!   arithmetic and one selection per page drives every column.
//! - Integers, dates (days) and decimals (scaled integers) are stored by frame of reference and
//!   bit-packed to the narrowest width per page; strings are dictionary codes while the column
//!   has at most [`format::DICTIONARY_LIMIT`] distinct values, else lengths and a heap (the heap
//!   compressed by the tier's codec); floats are plain; booleans and validity are bitmaps.
//! - [`TableWriter`] takes Arrow [`RecordBatch`](arrow_array::RecordBatch)es of any size;
//!   [`TableReader`] reads pages back as Arrow arrays, scans projections of chosen pages, and
//!   prunes pages by zone map; [`generate_tpch`] writes the eight TPC-H tables.
//!
//! The byte layout is in `docs/FORMATS.md` ("Column tables (inpath-table)").
//!
//! ```
//! use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
//! use inpath_table::{format::Scalar, TableReader, TableWriter, WriteOptions};
//! use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
//! use std::sync::Arc;
//!
//! let dir = tempfile::tempdir()?;
//! let key = Key::new(&[7; 32])?;
//! let options = WriteOptions {
//!     rows_per_page: 1000,
//!     seal: SealConfig { compression: Compression::Lz4, cipher: Cipher::Gcm },
//!     key: Some((1, key.clone())),
//!     ..WriteOptions::default()
//! };
//! let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..2500));
//! let names: ArrayRef = Arc::new(StringArray::from_iter_values(
//!     (0..2500).map(|i| format!("name {}", i % 7)),
//! ));
//! let batch = RecordBatch::try_from_iter([("id", ids), ("name", names)])?;
//!
//! let table = dir.path().join("people");
//! let mut writer = TableWriter::create(&table, batch.schema(), options)?;
//! writer.write(&batch.slice(0, 1200))?; // any chunking gives the same files
//! writer.write(&batch.slice(1200, 1300))?;
//! let summary = writer.finish()?;
//! assert_eq!((summary.rows, summary.pages), (2500, 3));
//!
//! let mut keys = KeyRing::new();
//! keys.insert(1, key);
//! let reader = TableReader::open(&table, &keys)?;
//! // Only page 2 can hold ids from 2100 up: pages 0 and 1 are never unsealed.
//! let pages = reader.prune(0, Some(&Scalar::Int(2100)), None)?;
//! assert_eq!(pages, vec![2]);
//! let batches: Vec<RecordBatch> = reader.scan(&[1], &pages)?.collect::<Result<_, _>>()?;
//! assert_eq!(batches[0].num_rows(), 500);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// Unsafe code only in `arch`: calls of kernels compiled for CPU features it detected.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod arch;
pub mod error;
pub mod format;
pub mod import;
mod pack;
mod page;
pub mod reader;
pub mod tpch;
pub mod writer;

pub use error::{Error, Result};
pub use format::{LogicalType, Manifest, Scalar};
pub use import::{import_file, stored_type, ImportFormat};
pub use pack::ForBlock;
pub use reader::{open_table_dirs, read_manifest, table_dirs, Scan, TableReader};
pub use tpch::{generate_tpch, GenOptions, TPCH_TABLES};
pub use writer::{TableSummary, TableWriter, WriteOptions};
#[doc(hidden)]
pub mod testing {
    //! Internals exposed for the integration tests (not a stable API).
    pub use crate::pack::{encode_for, parse_for, width_for};

    /// `n` values in `[lo, lo + span)` from a xorshift generator seeded by `seed`: fixed inputs
    /// for the property tests.
    pub fn xorshift(seed: u64, n: usize, lo: i64, span: u64) -> Vec<i64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                lo + (x % span.max(1)) as i64
            })
            .collect()
    }
}
