//! The sufficient statistics (count, per-stream sums, per-pair sums of products), their exact
//! merge, and the statistics file.
//!
//! # The statistics file
//!
//! All integers little-endian. Documented in `docs/FORMATS.md` (`## corr statistics file`).
//!
//! ```text
//! offset  size  field
//!      0     8  magic "INPCORR\0"
//!      8     2  format version (1)
//!     10     1  item type code: 0 u8, 1 u16, 2 u32, 3 u64, 4 i8, 5 i16, 6 i32, 7 i64, 8 f32, 9 f64
//!     11     1  kind: 0 Pearson statistics (mergeable), 1 Spearman rank statistics (not mergeable)
//!     12     4  reserved, 0
//!     16     8  streams M (2 or more)
//!     24     8  count N (rows)
//!     32     8  bytes of the names block that follows
//!     40     -  names: M times (u32 byte length, UTF-8 name)
//!      -     -  sums: M entries, stream order
//!      -     -  products: M(M+1)/2 entries, upper triangle with the diagonal, row by row:
//!               (0,0) (0,1) .. (0,M-1) (1,1) (1,2) .. (M-1,M-1); the diagonal holds the sums of
//!               squares
//!    end-4   4  CRC-32 (IEEE) of every byte before it
//! ```
//!
//! Entry sizes: integer types of 8 to 32 bits store sums and products as 16-byte two's
//! complement integers; 64-bit integer types store sums in 16 bytes and products in 32 bytes;
//! float types store every entry as a double-double, two `f64` (the leading part first).

use crate::wide::{Dd, I256};
use crate::DType;
use inpath_core::{Error, Result};
use std::path::Path;

/// Magic number at the start of a statistics file.
pub const MAGIC: [u8; 8] = *b"INPCORR\0";
/// The statistics file format version this crate writes (and the newest it reads).
pub const VERSION: u16 = 1;
/// The most streams one job may have: the state grows as M^2 (24 to 100 bytes a pair while
/// accumulating, by type), so 8192 streams take 0.8 to 3.5 GB.
pub const MAX_STREAMS: usize = 8192;
/// The largest statistics file a reader takes (2 GiB): 8,192 streams of 256-bit sums hold
/// about 1.1 GB.
pub const MAX_FILE: u64 = 2 << 30;

/// What the statistics are of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The streams' own values: mergeable with other statistics of the same streams.
    Pearson,
    /// The ranks of one whole job (Spearman): ranks are global, so these do not merge.
    SpearmanRanks,
}

/// One statistic, exact for integer types.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stat {
    /// An exact integer.
    Int(I256),
    /// A double-double (float types).
    Float(Dd),
}

impl Stat {
    /// The nearest `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Stat::Int(v) => v.to_f64(),
            Stat::Float(d) => d.to_f64(),
        }
    }
}

impl std::fmt::Display for Stat {
    /// Exact decimal for integers; the nearest `f64` for floats.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stat::Int(v) => write!(f, "{v}"),
            Stat::Float(d) => write!(f, "{}", d.to_f64()),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Data {
    Int {
        sums: Vec<i128>,
        products: Vec<i128>,
    },
    Wide {
        sums: Vec<i128>,
        products: Vec<I256>,
    },
    Float {
        sums: Vec<Dd>,
        products: Vec<Dd>,
    },
}

/// Count, per-stream sums and per-pair sums of products of M streams: everything Pearson
/// correlation, covariance, regression and cosine similarity need. Exact for integer types.
#[derive(Clone, Debug, PartialEq)]
pub struct Statistics {
    dtype: DType,
    kind: Kind,
    names: Vec<String>,
    count: u64,
    pub(crate) data: Data,
}

/// Row `i` of the triangle with the diagonal starts at `i*m - i*(i-1)/2`.
#[inline]
pub(crate) fn tri_row(m: usize, i: usize) -> usize {
    i * m - i * i.saturating_sub(1) / 2
}

/// Default stream names: `0`, `1`, ...
pub fn default_names(m: usize) -> Vec<String> {
    (0..m).map(|i| i.to_string()).collect()
}

/// Checks a stream count.
pub fn check_streams(m: usize) -> Result<()> {
    if (2..=MAX_STREAMS).contains(&m) {
        Ok(())
    } else {
        Err(Error::parameter(
            "streams",
            m,
            format!("2 to {MAX_STREAMS} (correlation needs at least two streams)"),
        ))
    }
}

impl Statistics {
    /// Empty statistics of `names.len()` streams of `dtype` (at least 2).
    pub fn new(dtype: DType, names: Vec<String>) -> Result<Statistics> {
        Statistics::with_kind(dtype, Kind::Pearson, names)
    }

    pub(crate) fn with_kind(dtype: DType, kind: Kind, names: Vec<String>) -> Result<Statistics> {
        let m = names.len();
        check_streams(m)?;
        let pairs = m * (m + 1) / 2;
        let data = match dtype.exactness() {
            crate::Exactness::Int128 => Data::Int {
                sums: vec![0; m],
                products: vec![0; pairs],
            },
            crate::Exactness::Int256 => Data::Wide {
                sums: vec![0; m],
                products: vec![I256::ZERO; pairs],
            },
            crate::Exactness::DoubleDouble => Data::Float {
                sums: vec![Dd::ZERO; m],
                products: vec![Dd::ZERO; pairs],
            },
        };
        Ok(Statistics {
            dtype,
            kind,
            names,
            count: 0,
            data,
        })
    }

    /// The item type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// What the statistics are of.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Number of streams M.
    pub fn streams(&self) -> usize {
        self.names.len()
    }

    /// Stream names (CSV headers, or `0`, `1`, ...).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Replaces the stream names (same count).
    pub fn set_names(&mut self, names: Vec<String>) -> Result<()> {
        if names.len() != self.streams() {
            return Err(Error::parameter(
                "stream names",
                names.len(),
                format!("exactly {} names, one per stream", self.streams()),
            ));
        }
        self.names = names;
        Ok(())
    }

    /// Rows N.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Number of coefficients M(M-1)/2.
    pub fn pairs(&self) -> usize {
        let m = self.streams();
        m * (m - 1) / 2
    }

    fn check_stream(&self, i: usize) {
        assert!(
            i < self.streams(),
            "stream {i} out of range (M = {})",
            self.streams()
        );
    }

    /// Sum of stream `i`. Panics if `i >= M`.
    pub fn sum(&self, i: usize) -> Stat {
        self.check_stream(i);
        match &self.data {
            Data::Int { sums, .. } | Data::Wide { sums, .. } => Stat::Int(I256::from_i128(sums[i])),
            Data::Float { sums, .. } => Stat::Float(sums[i]),
        }
    }

    /// Sum of products of streams `i` and `j` (the sum of squares when `i == j`). Panics if
    /// either is `>= M`.
    pub fn sum_of_products(&self, i: usize, j: usize) -> Stat {
        self.check_stream(i);
        self.check_stream(j);
        let (i, j) = (i.min(j), i.max(j));
        let k = tri_row(self.streams(), i) + (j - i);
        match &self.data {
            Data::Int { products, .. } => Stat::Int(I256::from_i128(products[k])),
            Data::Wide { products, .. } => Stat::Int(products[k]),
            Data::Float { products, .. } => Stat::Float(products[k]),
        }
    }

    /// Sum of squares of stream `i`.
    pub fn sum_of_squares(&self, i: usize) -> Stat {
        self.sum_of_products(i, i)
    }

    pub(crate) fn add_count(&mut self, rows: u64) -> Result<()> {
        self.count = self.count.checked_add(rows).ok_or_else(|| {
            Error::State("row count overflows 2^64: the statistics cannot hold more rows".into())
        })?;
        Ok(())
    }

    pub(crate) fn set_kind(&mut self, kind: Kind) {
        self.kind = kind;
    }

    /// Folds `other` into `self`: afterwards `self` holds the statistics of both inputs, exactly
    /// as if one job had read them all. Both must be Pearson statistics of the same type,
    /// stream count and stream names.
    pub fn merge(&mut self, other: &Statistics) -> Result<()> {
        self.check_compatible(other)?;
        let overflow = || Error::State("statistics overflow: too many rows to merge".into());
        self.count = self.count.checked_add(other.count).ok_or_else(overflow)?;
        match (&mut self.data, &other.data) {
            (
                Data::Int { sums, products },
                Data::Int {
                    sums: s2,
                    products: p2,
                },
            ) => {
                add_i128(sums, s2).ok_or_else(overflow)?;
                add_i128(products, p2).ok_or_else(overflow)?;
            }
            (
                Data::Wide { sums, products },
                Data::Wide {
                    sums: s2,
                    products: p2,
                },
            ) => {
                add_i128(sums, s2).ok_or_else(overflow)?;
                for (a, b) in products.iter_mut().zip(p2) {
                    *a = a.checked_add(*b).ok_or_else(overflow)?;
                }
            }
            (
                Data::Float { sums, products },
                Data::Float {
                    sums: s2,
                    products: p2,
                },
            ) => {
                for (a, b) in sums.iter_mut().zip(s2).chain(products.iter_mut().zip(p2)) {
                    *a = *a + *b;
                }
            }
            _ => {
                return Err(Error::Incompatible(
                    "statistics hold different number kinds".into(),
                ))
            }
        }
        Ok(())
    }

    fn check_compatible(&self, other: &Statistics) -> Result<()> {
        if self.kind == Kind::SpearmanRanks || other.kind == Kind::SpearmanRanks {
            return Err(Error::Incompatible(
                "Spearman statistics are of ranks over one whole job and cannot be merged; \
                 compute Spearman over all inputs at once"
                    .into(),
            ));
        }
        if self.dtype != other.dtype {
            return Err(Error::Incompatible(format!(
                "item types differ: {} and {}",
                self.dtype, other.dtype
            )));
        }
        if self.streams() != other.streams() {
            return Err(Error::Incompatible(format!(
                "stream counts differ: {} and {}",
                self.streams(),
                other.streams()
            )));
        }
        if let Some(i) = (0..self.streams()).find(|&i| self.names[i] != other.names[i]) {
            return Err(Error::Incompatible(format!(
                "stream {i} is named {:?} in one and {:?} in the other",
                self.names[i], other.names[i]
            )));
        }
        Ok(())
    }

    /// Serializes to the statistics file format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let m = self.streams();
        let mut names = Vec::new();
        for name in &self.names {
            names.extend_from_slice(&(name.len() as u32).to_le_bytes());
            names.extend_from_slice(name.as_bytes());
        }
        let mut out = Vec::with_capacity(48 + names.len() + (m + m * (m + 1) / 2) * 32);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(self.dtype.code());
        out.push(match self.kind {
            Kind::Pearson => 0,
            Kind::SpearmanRanks => 1,
        });
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(m as u64).to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&(names.len() as u64).to_le_bytes());
        out.extend_from_slice(&names);
        match &self.data {
            Data::Int { sums, products } => {
                for v in sums.iter().chain(products) {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Data::Wide { sums, products } => {
                for v in sums {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                for v in products {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Data::Float { sums, products } => {
                for v in sums.iter().chain(products) {
                    out.extend_from_slice(&v.hi.to_le_bytes());
                    out.extend_from_slice(&v.lo.to_le_bytes());
                }
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads the statistics file format; `what` names the source in errors (`a.stats`).
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<Statistics> {
        let bad = |detail: String| Error::corrupt(format!("statistics file {what}"), detail);
        if bytes.len() < 44 {
            return Err(bad(format!(
                "{} bytes is too short for a header (44 bytes at least)",
                bytes.len()
            )));
        }
        if bytes[..8] != MAGIC {
            return Err(bad(
                "it does not start with the magic \"INPCORR\\0\" (not a corr statistics file)"
                    .into(),
            ));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version == 0 || version > VERSION {
            return Err(bad(format!(
                "format version {version} is not supported (this build reads versions 1 to {VERSION})"
            )));
        }
        let actual = crc32fast::hash(body);
        if stored != actual {
            return Err(bad(format!(
                "checksum mismatch (stored {stored:08x}, computed {actual:08x}): the file is damaged or truncated"
            )));
        }
        let dtype = DType::from_code(bytes[10])
            .ok_or_else(|| bad(format!("unknown item type code {}", bytes[10])))?;
        let kind = match bytes[11] {
            0 => Kind::Pearson,
            1 => Kind::SpearmanRanks,
            k => return Err(bad(format!("unknown statistics kind {k}"))),
        };
        if bytes[12..16] != [0; 4] {
            return Err(bad(format!(
                "reserved bytes 12 to 15 are {:02x?}, not zero (a newer or damaged file)",
                &bytes[12..16]
            )));
        }
        let mut r = Reader {
            bytes: body,
            at: 16,
        };
        let m = r.u64()?;
        if m < 2 || m > MAX_STREAMS as u64 {
            return Err(bad(format!(
                "stream count {m} is outside 2 to {MAX_STREAMS}"
            )));
        }
        let m = m as usize;
        let count = r.u64()?;
        let names_len = r.u64()? as usize;
        let names_block = r
            .take(names_len)
            .map_err(|_| bad("the names block is truncated".into()))?;
        let mut names = Vec::with_capacity(m);
        let mut nr = Reader {
            bytes: names_block,
            at: 0,
        };
        for i in 0..m {
            let len = nr
                .u32()
                .map_err(|_| bad(format!("name {i} is truncated")))? as usize;
            let name = nr
                .take(len)
                .map_err(|_| bad(format!("name {i} is truncated")))?;
            names.push(
                String::from_utf8(name.to_vec())
                    .map_err(|_| bad(format!("name {i} is not UTF-8")))?,
            );
        }
        if nr.at != names_block.len() {
            return Err(bad("the names block has bytes after the last name".into()));
        }
        let pairs = m * (m + 1) / 2;
        let (sum_size, product_size) = match dtype.exactness() {
            crate::Exactness::Int256 => (16, 32),
            _ => (16, 16),
        };
        let expect = m * sum_size + pairs * product_size;
        if r.bytes.len() - r.at != expect {
            return Err(bad(format!(
                "{} bytes of sums and products, but {m} streams of {dtype} need {expect}",
                r.bytes.len() - r.at
            )));
        }
        let mut stats = Statistics::with_kind(dtype, kind, names)?;
        stats.count = count;
        let rest = &r.bytes[r.at..];
        let (sum_bytes, product_bytes) = rest.split_at(m * sum_size);
        let i128_at = |b: &[u8]| {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            i128::from_le_bytes(a)
        };
        let dd_at = |b: &[u8]| {
            let mut h = [0u8; 8];
            let mut l = [0u8; 8];
            h.copy_from_slice(&b[..8]);
            l.copy_from_slice(&b[8..16]);
            Dd {
                hi: f64::from_le_bytes(h),
                lo: f64::from_le_bytes(l),
            }
        };
        match &mut stats.data {
            Data::Int { sums, products } => {
                for (v, b) in sums.iter_mut().zip(sum_bytes.chunks_exact(16)) {
                    *v = i128_at(b);
                }
                for (v, b) in products.iter_mut().zip(product_bytes.chunks_exact(16)) {
                    *v = i128_at(b);
                }
            }
            Data::Wide { sums, products } => {
                for (v, b) in sums.iter_mut().zip(sum_bytes.chunks_exact(16)) {
                    *v = i128_at(b);
                }
                for (v, b) in products.iter_mut().zip(product_bytes.chunks_exact(32)) {
                    let mut a = [0u8; 32];
                    a.copy_from_slice(b);
                    *v = I256::from_le_bytes(a);
                }
            }
            Data::Float { sums, products } => {
                for (v, b) in sums.iter_mut().zip(sum_bytes.chunks_exact(16)) {
                    *v = dd_at(b);
                }
                for (v, b) in products.iter_mut().zip(product_bytes.chunks_exact(16)) {
                    *v = dd_at(b);
                }
            }
        }
        Ok(stats)
    }

    /// Writes the statistics file, all-or-nothing (a temporary file renamed into place; see
    /// `inpath_core::output`).
    pub fn save(&self, path: &Path) -> Result<()> {
        inpath_core::output::write_file(path, &self.to_bytes(), &[])
    }

    /// Reads a statistics file.
    pub fn load(path: &Path) -> Result<Statistics> {
        let bytes = inpath_core::source::read_bounded(path, "a statistics file", MAX_FILE)?;
        Statistics::from_bytes(&bytes, &path.display().to_string())
    }
}

fn add_i128(a: &mut [i128], b: &[i128]) -> Option<()> {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.checked_add(*y)?;
    }
    Some(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], ()> {
        let end = self.at.checked_add(n).ok_or(())?;
        let out = self.bytes.get(self.at..end).ok_or(())?;
        self.at = end;
        Ok(out)
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self
            .take(8)
            .map_err(|_| Error::corrupt("statistics file", "header is truncated"))?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn u32(&mut self) -> std::result::Result<u32, ()> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}
