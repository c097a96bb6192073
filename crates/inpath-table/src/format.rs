//! The on-disk format: constants, the manifest and its file wrapper, column file headers.
//!
//! A table is a directory:
//!
//! ```text
//! TABLE/
//!   manifest      preamble + one seal record holding the manifest JSON (below)
//!   0.col         column 0: 16-byte header, then one seal record per page, back to back
//!   1.col         column 1 ...
//! ```
//!
//! Manifest file:
//!
//! ```text
//! offset size field
//!  0     8    magic "INPQMANI"
//!  8     2    format version, u16 (1)
//! 10     1    sealed: 0 = the record's cipher is none, 1 = encrypted
//! 11     5    reserved, zero
//! 16     8    record length L, u64
//! 24     L    one inpath-seal record; its page is the manifest as UTF-8 JSON ([`Manifest`])
//! ```
//!
//! Column file header:
//!
//! ```text
//! offset size field
//!  0     8    magic "INPQCOLM"
//!  8     2    format version, u16 (1)
//! 10     2    reserved, zero
//! 12     4    column index, u32
//! 16     -    page records; page k at the offset and length the manifest records
//! ```
//!
//! Full description with the page layouts: `docs/FORMATS.md`, "Column tables (inpath-table)".

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// Magic number of the manifest file.
pub const MANIFEST_MAGIC: [u8; 8] = *b"INPQMANI";
/// Magic number of a column file.
pub const COLUMN_MAGIC: [u8; 8] = *b"INPQCOLM";
/// Format version written by this build (manifest, column files, pages).
pub const VERSION: u16 = 1;
/// Length of the manifest preamble.
pub const MANIFEST_PREAMBLE: usize = 24;
/// Length of a column file header.
pub const COLUMN_HEADER: usize = 16;
/// Name of the manifest file in a table directory.
pub const MANIFEST_FILE: &str = "manifest";
/// Default rows per page.
pub const DEFAULT_ROWS_PER_PAGE: usize = 65_536;
/// Largest rows per page accepted (a page's row count is a u32).
pub const MAX_ROWS_PER_PAGE: usize = 1 << 24;
/// A string column is dictionary-encoded while its dictionary holds at most this many distinct
/// values; the first page that would take it past the limit, and every later page, store
/// lengths and a heap instead.
pub const DICTIONARY_LIMIT: usize = 4096;

/// The name of column `index`'s file.
pub fn column_file_name(index: usize) -> String {
    format!("{index}.col")
}

/// The logical type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogicalType {
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// Days since 1970-01-01, i32.
    Date32,
    /// Decimal with `precision` digits, `scale` of them after the point, stored as the scaled
    /// integer.
    Decimal128 {
        /// Total digits (1..=38).
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
    /// IEEE 754 double.
    Float64,
    /// UTF-8 text (written from Utf8, LargeUtf8 or Utf8View; read back as Utf8).
    Utf8,
    /// Boolean.
    Boolean,
}

impl LogicalType {
    /// The Arrow type a column of this type reads back as.
    pub fn arrow_type(self) -> arrow_schema::DataType {
        use arrow_schema::DataType;
        match self {
            LogicalType::Int32 => DataType::Int32,
            LogicalType::Int64 => DataType::Int64,
            LogicalType::Date32 => DataType::Date32,
            LogicalType::Decimal128 { precision, scale } => DataType::Decimal128(precision, scale),
            LogicalType::Float64 => DataType::Float64,
            LogicalType::Utf8 => DataType::Utf8,
            LogicalType::Boolean => DataType::Boolean,
        }
    }

    /// The logical type for an Arrow type, or `None` when the format cannot store it.
    pub fn from_arrow(data_type: &arrow_schema::DataType) -> Option<LogicalType> {
        use arrow_schema::DataType;
        Some(match data_type {
            DataType::Int32 => LogicalType::Int32,
            DataType::Int64 => LogicalType::Int64,
            DataType::Date32 => LogicalType::Date32,
            DataType::Decimal128(p, s) => LogicalType::Decimal128 {
                precision: *p,
                scale: *s,
            },
            DataType::Float64 => LogicalType::Float64,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => LogicalType::Utf8,
            DataType::Boolean => LogicalType::Boolean,
            _ => return None,
        })
    }

    /// Whether values are integers stored by frame of reference (dates and decimals included).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            LogicalType::Int32
                | LogicalType::Int64
                | LogicalType::Date32
                | LogicalType::Decimal128 { .. }
        )
    }

    /// The range of the stored integer (decimals: ±(10^precision − 1)).
    pub(crate) fn int_range(self) -> (i128, i128) {
        match self {
            LogicalType::Int32 | LogicalType::Date32 => (i32::MIN as i128, i32::MAX as i128),
            LogicalType::Int64 => (i64::MIN as i128, i64::MAX as i128),
            LogicalType::Decimal128 { precision, .. } => {
                let max = 10i128
                    .checked_pow(u32::from(precision.min(38)))
                    .map_or(i128::MAX, |p| p - 1);
                (-max, max)
            }
            _ => (0, 0),
        }
    }
}

/// A zone-map bound. Integers (dates as days, decimals as the scaled integer, dictionary
/// strings never: they use `Str`) are `Int`; floats are kept as their IEEE bits so that
/// infinities survive JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scalar {
    /// An integer, a date (days) or a decimal's scaled integer.
    Int(i128),
    /// A float64, as `f64::to_bits`.
    F64(u64),
    /// A string (byte-wise order).
    Str(String),
    /// A boolean (false < true).
    Bool(bool),
}

impl Scalar {
    /// A float bound.
    pub fn float(v: f64) -> Scalar {
        Scalar::F64(v.to_bits())
    }

    /// Compares two bounds of the same kind; `None` for different kinds (an `Int` compares
    /// with an `F64` as a float).
    pub fn partial_cmp_to(&self, other: &Scalar) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => Some(a.cmp(b)),
            (Scalar::F64(a), Scalar::F64(b)) => f64::from_bits(*a).partial_cmp(&f64::from_bits(*b)),
            (Scalar::Int(a), Scalar::F64(b)) => (*a as f64).partial_cmp(&f64::from_bits(*b)),
            (Scalar::F64(a), Scalar::Int(b)) => f64::from_bits(*a).partial_cmp(&(*b as f64)),
            (Scalar::Str(a), Scalar::Str(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
            (Scalar::Bool(a), Scalar::Bool(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::F64(b) => write!(f, "{}", f64::from_bits(*b)),
            Scalar::Str(s) => write!(f, "{s:?}"),
            Scalar::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// How a page's values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// Frame of reference + bit-packing (integers, dates, decimals).
    For,
    /// Plain little-endian f64.
    Float,
    /// One bit per value.
    Bitmap,
    /// Codes into the column's dictionary, frame of reference + bit-packing.
    Dictionary,
    /// Lengths (frame of reference + bit-packing) and a byte heap.
    Heap,
}

impl Encoding {
    pub(crate) fn code(self) -> u8 {
        match self {
            Encoding::For => 1,
            Encoding::Float => 2,
            Encoding::Bitmap => 3,
            Encoding::Dictionary => 4,
            Encoding::Heap => 5,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Encoding> {
        Some(match code {
            1 => Encoding::For,
            2 => Encoding::Float,
            3 => Encoding::Bitmap,
            4 => Encoding::Dictionary,
            5 => Encoding::Heap,
            _ => return None,
        })
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::For => "for",
            Encoding::Float => "float",
            Encoding::Bitmap => "bitmap",
            Encoding::Dictionary => "dictionary",
            Encoding::Heap => "heap",
        }
    }
}

/// One page of one column, as the manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageMeta {
    /// Byte offset of the page's seal record in the column file.
    pub offset: u64,
    /// Length of the record.
    pub len: u64,
    /// Encoding of the values.
    pub encoding: Encoding,
    /// Bits per packed value (FOR, dictionary codes, heap lengths); 64 for floats, 1 for
    /// booleans.
    pub width: u8,
    /// Null values in the page.
    pub null_count: u64,
    /// Smallest non-null value (none when every value is null or NaN).
    pub min: Option<Scalar>,
    /// Largest non-null value.
    pub max: Option<Scalar>,
    /// Whether a float page holds NaN (its zone map then never prunes it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_nan: bool,
}

/// One column, as the manifest records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColumnMeta {
    /// The column's name.
    pub name: String,
    /// Its logical type.
    #[serde(rename = "type")]
    pub logical: LogicalType,
    /// Whether nulls are allowed.
    pub nullable: bool,
    /// The column file's name in the table directory.
    pub file: String,
    /// The column file's length in bytes.
    pub file_len: u64,
    /// The dictionary of a string column's dictionary pages (codes index it), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dictionary: Option<Vec<String>>,
    /// The pages, in row order.
    pub pages: Vec<PageMeta>,
}

/// How the pages and the manifest were sealed (informational; every record names its own
/// codec, cipher and key id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierMeta {
    /// Codec of heap pages and the manifest (`none`, `lz4`, `zstd-1`...).
    pub compression: String,
    /// Cipher of every record (`none`, `ctr`, `gcm`...).
    pub cipher: String,
    /// Key id (0 without encryption).
    pub key_id: u32,
}

/// The manifest: everything about a table except its page contents.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version (the preamble's, repeated).
    pub version: u16,
    /// The table's name.
    pub table: String,
    /// Rows per page R: page k holds rows [kR, (k+1)R).
    pub rows_per_page: u64,
    /// Rows in the table.
    pub row_count: u64,
    /// The sealing tier.
    pub tier: TierMeta,
    /// The columns, in schema order.
    pub columns: Vec<ColumnMeta>,
}

impl Manifest {
    /// Pages per column: ⌈rows / R⌉.
    pub fn page_count(&self) -> usize {
        if self.rows_per_page == 0 {
            return 0;
        }
        self.row_count.div_ceil(self.rows_per_page) as usize
    }

    /// Rows in page `page`.
    pub fn page_rows(&self, page: usize) -> usize {
        let start = page as u64 * self.rows_per_page;
        (self.row_count.saturating_sub(start)).min(self.rows_per_page) as usize
    }

    /// Checks internal consistency (not the files): counts, page lengths against file
    /// lengths, dictionaries, zone-map kinds.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |detail: String| Error::ManifestDamaged {
            table: self.table.clone(),
            detail,
        };
        if self.version != VERSION {
            return Err(bad(format!(
                "its JSON says version {}, the preamble {VERSION}",
                self.version
            )));
        }
        if self.rows_per_page == 0 || self.rows_per_page > MAX_ROWS_PER_PAGE as u64 {
            return Err(bad(format!(
                "rows per page {} is not in 1..={MAX_ROWS_PER_PAGE}",
                self.rows_per_page
            )));
        }
        let pages = self.page_count();
        for (i, c) in self.columns.iter().enumerate() {
            if c.file != column_file_name(i) {
                return Err(bad(format!(
                    "column {} has file {:?}, expected {:?}",
                    c.name,
                    c.file,
                    column_file_name(i)
                )));
            }
            if c.pages.len() != pages {
                return Err(bad(format!(
                    "column {} has {} pages, {} rows at {} per page need {pages}",
                    c.name,
                    c.pages.len(),
                    self.row_count,
                    self.rows_per_page
                )));
            }
            if c.dictionary.is_some() && c.logical != LogicalType::Utf8 {
                return Err(bad(format!(
                    "column {} is not text but has a dictionary",
                    c.name
                )));
            }
            let mut end = COLUMN_HEADER as u64;
            for (k, p) in c.pages.iter().enumerate() {
                let ok = p.offset == end
                    && p.len >= inpath_seal::page::HEADER_LEN as u64
                    && p.offset.checked_add(p.len).is_some_and(|e| e <= c.file_len);
                if !ok {
                    return Err(bad(format!(
                        "column {}, page {k}: offset {} length {} does not follow the previous page \
                         (at {end}) inside the {}-byte file",
                        c.name, p.offset, p.len, c.file_len
                    )));
                }
                end = p.offset + p.len;
                if p.null_count > self.page_rows(k) as u64 || (!c.nullable && p.null_count > 0) {
                    return Err(bad(format!(
                        "column {}, page {k}: null count {} is not possible",
                        c.name, p.null_count
                    )));
                }
            }
            if end != c.file_len {
                return Err(bad(format!(
                    "column {}: pages end at {end} but the file is {} bytes",
                    c.name, c.file_len
                )));
            }
        }
        Ok(())
    }
}

/// Builds the manifest file from its sealed record.
pub(crate) fn manifest_file(record: &[u8], sealed: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(MANIFEST_PREAMBLE + record.len());
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(u8::from(sealed));
    out.extend_from_slice(&[0; 5]);
    out.extend_from_slice(&(record.len() as u64).to_le_bytes());
    out.extend_from_slice(record);
    out
}

/// The 16-byte header of column file `index`.
pub(crate) fn column_header(index: usize) -> [u8; COLUMN_HEADER] {
    let mut h = [0u8; COLUMN_HEADER];
    h[..8].copy_from_slice(&COLUMN_MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(index as u32).to_le_bytes());
    h
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
