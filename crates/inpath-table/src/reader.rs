//! [`TableReader`]: open a table directory, read pages, scan, prune with zone maps.

use crate::error::{Error, Result};
use crate::format::{
    self, ColumnMeta, Encoding, LogicalType, Manifest, PageMeta, Scalar, COLUMN_HEADER,
    COLUMN_MAGIC, MANIFEST_FILE, MANIFEST_MAGIC, MANIFEST_PREAMBLE, VERSION,
};
use crate::page;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow_schema::{Field, Schema, SchemaRef};
use inpath_seal::{KeyRing, Unsealer};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open table: the checked manifest and the open column files.
pub struct TableReader {
    dir: PathBuf,
    manifest: Manifest,
    schema: SchemaRef,
    files: Vec<File>,
    /// Per column: the file mapped on its first page read (`None` inside: it could not be
    /// mapped, and pages are read with pread). Pages are then unsealed straight from the
    /// page cache, not copied into a buffer first (pread's copy was a fifth of Q6).
    maps: Vec<std::sync::OnceLock<Option<inpath_core::source::Mapping>>>,
    unsealer: Unsealer,
    /// Per column: the dictionary as an Arrow array when the column reads back as a
    /// `DictionaryArray` ([`TableReader::with_dictionary_arrays`]).
    dictionary_values: Vec<Option<ArrayRef>>,
}

impl std::fmt::Debug for TableReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableReader")
            .field("dir", &self.dir)
            .field("table", &self.manifest.table)
            .field("rows", &self.manifest.row_count)
            .finish()
    }
}

/// Reads and checks a manifest file; `keys` opens it when it is sealed.
pub fn read_manifest(dir: &Path, keys: &KeyRing) -> Result<Manifest> {
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let path = dir.join(MANIFEST_FILE);
    let bytes = std::fs::read(&path).map_err(|source| Error::ManifestMissing {
        table: dir_name.clone(),
        path: path.clone(),
        source,
    })?;
    let damaged = |detail: String| Error::ManifestDamaged {
        table: dir_name.clone(),
        detail,
    };
    if bytes.len() < MANIFEST_PREAMBLE {
        if bytes.len() >= 8 && bytes[..8] != MANIFEST_MAGIC {
            return Err(bad_magic(&dir_name, &path, &bytes));
        }
        return Err(damaged(format!(
            "{} bytes, shorter than the {MANIFEST_PREAMBLE}-byte preamble",
            bytes.len()
        )));
    }
    if bytes[..8] != MANIFEST_MAGIC {
        return Err(bad_magic(&dir_name, &path, &bytes));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            table: dir_name,
            what: "manifest".into(),
            version,
            supported: "1",
        });
    }
    if bytes[10] > 1 || bytes[11..16] != [0; 5] {
        return Err(damaged(
            "preamble flags or reserved bytes are not valid".into(),
        ));
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let have = (bytes.len() - MANIFEST_PREAMBLE) as u64;
    if len != have {
        return Err(damaged(format!(
            "the preamble says the record is {len} bytes, the file holds {have}"
        )));
    }
    let json = Unsealer::new(keys)
        .unseal(&bytes[MANIFEST_PREAMBLE..])
        .map_err(|source| Error::ManifestSeal {
            table: dir_name.clone(),
            source,
        })?;
    let manifest: Manifest =
        serde_json::from_slice(&json).map_err(|e| damaged(format!("its JSON: {e}")))?;
    manifest.validate()?;
    Ok(manifest)
}

fn bad_magic(table: &str, path: &Path, bytes: &[u8]) -> Error {
    Error::BadMagic {
        table: table.to_string(),
        path: path.to_path_buf(),
        found: format::hex(&bytes[..bytes.len().min(8)]),
        expected: format::hex(&MANIFEST_MAGIC),
    }
}

impl TableReader {
    /// Opens the table in `dir`: reads and checks the manifest (unsealing it with `keys` when
    /// it is sealed), opens every column file and checks its length and header.
    pub fn open(dir: &Path, keys: &KeyRing) -> Result<TableReader> {
        let manifest = read_manifest(dir, keys)?;
        let mut files = Vec::new();
        for (i, c) in manifest.columns.iter().enumerate() {
            let path = dir.join(&c.file);
            let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
            let found = file.metadata().map_err(|e| Error::io(&path, e))?.len();
            if found != c.file_len {
                return Err(Error::ColumnFileLength {
                    table: manifest.table.clone(),
                    column: c.name.clone(),
                    path,
                    expected: c.file_len,
                    found,
                });
            }
            let mut header = [0u8; COLUMN_HEADER];
            file.read_exact_at(&mut header, 0)
                .map_err(|e| Error::io(&path, e))?;
            let damaged = |detail: String| Error::ColumnFileDamaged {
                table: manifest.table.clone(),
                column: c.name.clone(),
                path: path.clone(),
                detail,
            };
            if header[..8] != COLUMN_MAGIC {
                return Err(damaged(format!(
                    "magic is {}, expected {}",
                    format::hex(&header[..8]),
                    format::hex(&COLUMN_MAGIC)
                )));
            }
            let version = u16::from_le_bytes([header[8], header[9]]);
            if version != VERSION {
                return Err(Error::UnsupportedVersion {
                    table: manifest.table.clone(),
                    what: format!("column {} file {}", c.name, c.file),
                    version,
                    supported: "1",
                });
            }
            let index = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
            if header[10..12] != [0, 0] || index as usize != i {
                return Err(damaged(format!(
                    "the header names column {index}, this is column {i}"
                )));
            }
            files.push(file);
        }
        let fields: Vec<Field> = manifest
            .columns
            .iter()
            .map(|c| Field::new(&c.name, c.logical.arrow_type(), c.nullable))
            .collect();
        Ok(TableReader {
            dir: dir.to_path_buf(),
            schema: Arc::new(Schema::new(fields)),
            manifest,
            dictionary_values: vec![None; files.len()],
            maps: files.iter().map(|_| std::sync::OnceLock::new()).collect(),
            files,
            unsealer: Unsealer::new(keys),
        })
    }

    /// Reads string columns whose every page is dictionary-coded as
    /// `Dictionary(Int32, Utf8)` arrays over the column's dictionary (shared by every page, built
    /// once): a page is then its bit-packed codes, with no string copied or checked per row,
    /// and predicates on the column run once per distinct value (what the SQL scan uses).
    /// Other columns read as before; [`schema`](Self::schema) follows.
    pub fn with_dictionary_arrays(mut self) -> TableReader {
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for (i, c) in self.manifest.columns.iter().enumerate() {
            let all_coded = c.logical == LogicalType::Utf8
                && !c.pages.is_empty()
                && c.pages.iter().all(|p| p.encoding == Encoding::Dictionary);
            if let (true, Some(dict)) = (all_coded, &c.dictionary) {
                let values: ArrayRef =
                    Arc::new(arrow_array::StringArray::from_iter_values(dict.iter()));
                self.dictionary_values[i] = Some(values);
                fields[i] = Field::new(
                    &c.name,
                    arrow_schema::DataType::Dictionary(
                        Box::new(arrow_schema::DataType::Int32),
                        Box::new(arrow_schema::DataType::Utf8),
                    ),
                    c.nullable,
                );
            }
        }
        self.schema = Arc::new(Schema::new(fields));
        self
    }

    /// The table's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The checked manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.manifest.table
    }

    /// The Arrow schema pages read back as.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Bytes of the table's page records (every column's file, as sealed).
    pub fn bytes(&self) -> u64 {
        self.manifest
            .columns
            .iter()
            .flat_map(|c| c.pages.iter())
            .map(|p| p.len)
            .sum()
    }

    /// Rows in the table.
    pub fn row_count(&self) -> u64 {
        self.manifest.row_count
    }

    /// Pages per column.
    pub fn page_count(&self) -> usize {
        self.manifest.page_count()
    }

    /// Rows per page R.
    pub fn rows_per_page(&self) -> usize {
        self.manifest.rows_per_page as usize
    }

    /// The zone map (and placement) of `page` of `column`.
    pub fn zone_map(&self, column: usize, page: usize) -> Result<&PageMeta> {
        self.column_meta(column)?;
        self.check_page(page)?;
        Ok(&self.manifest.columns[column].pages[page])
    }

    fn column_meta(&self, column: usize) -> Result<&ColumnMeta> {
        self.manifest.columns.get(column).ok_or_else(|| {
            Error::parameter(
                "column",
                column,
                format!(
                    "0 to {} (table {})",
                    self.manifest.columns.len() as isize - 1,
                    self.manifest.table
                ),
            )
        })
    }

    fn check_page(&self, page: usize) -> Result<()> {
        if page >= self.page_count() {
            return Err(Error::parameter(
                "page",
                page,
                format!(
                    "0 to {} (table {} has {} pages)",
                    self.page_count() as isize - 1,
                    self.manifest.table,
                    self.page_count()
                ),
            ));
        }
        Ok(())
    }

    /// The index of the column named `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.manifest.columns.iter().position(|c| c.name == name)
    }

    /// Reads, unseals and decodes one page of one column.
    pub fn read_page(&self, column: usize, page: usize) -> Result<ArrayRef> {
        self.read_page_as(column, page, false)
    }

    /// As [`read_page`](Self::read_page), but a decimal page whose values all fit in 64 bits
    /// comes back as an `Int64` array of its scaled integers (the column's scale is in the
    /// manifest): the offload device computes on those, and skips widening them to 128 bits.
    pub fn read_page_narrow(&self, column: usize, page: usize) -> Result<ArrayRef> {
        self.read_page_as(column, page, true)
    }

    /// `f` over a page of a non-null integer, date or decimal column as its FOR block (value =
    /// reference + delta) without decoding the values: the offload device's selector compares
    /// the deltas, and its transformer loads reference + delta for only the rows it reads.
    /// `None` when the page is not stored that way (nulls, deltas wider than 32 bits, another
    /// encoding).
    pub fn read_page_for<R>(
        &self,
        column: usize,
        page: usize,
        f: impl FnOnce(&crate::ForBlock<'_>) -> R,
    ) -> Result<Option<R>> {
        let c = self.column_meta(column)?;
        self.check_page(page)?;
        let meta = &c.pages[page];
        if meta.encoding != crate::format::Encoding::For || meta.null_count != 0 {
            return Ok(None);
        }
        let rows = self.manifest.page_rows(page);
        self.with_page_bytes(column, page, |bytes| {
            page::for_block(bytes, rows).map(|b| f(&b))
        })
    }

    /// `f` over a page's bytes, unsealed: a page stored as it is (plain pages) is read where
    /// the column file is mapped, any other is opened into a buffer the thread keeps (a fresh
    /// one would be zeroed for every page first).
    fn with_page_bytes<R, F: FnOnce(&[u8]) -> R>(
        &self,
        column: usize,
        page: usize,
        f: F,
    ) -> Result<R> {
        let c = self.column_meta(column)?;
        let meta = &c.pages[page];
        thread_local! {
            static RECORD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
            static PAGE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let len = meta.len as usize;
        // (`f` goes to exactly one of the two calls below.)
        let unseal_then = |record: &[u8], f: F| {
            PAGE.with(|buffer| {
                let mut buffer = buffer.borrow_mut();
                let bytes = self
                    .unsealer
                    .unseal_in(record, &mut buffer)
                    .map_err(|source| Error::PageSeal {
                        table: self.manifest.table.clone(),
                        column: c.name.clone(),
                        page,
                        source: Box::new(source),
                    })?;
                Ok(f(bytes))
            })
        };
        let map = self.maps[column].get_or_init(|| {
            let file = self.files[column].try_clone().ok()?;
            inpath_core::source::Mapping::map_for_reads(file, &self.dir.join(&c.file))
        });
        if let Some(map) = map {
            let bytes = map.bytes();
            let record = usize::try_from(meta.offset)
                .ok()
                .and_then(|start| bytes.get(start..start.checked_add(len)?))
                .ok_or_else(|| {
                    Error::io(
                        self.dir.join(&c.file),
                        std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!(
                                "page {page} lies at bytes {}..{} of a {}-byte file",
                                meta.offset,
                                meta.offset.saturating_add(meta.len),
                                bytes.len()
                            ),
                        ),
                    )
                })?;
            let result = unseal_then(record, f);
            // A file truncated under the mapping reads as zeros: never taken as its pages (the
            // check comes after `f`, which may have read the page where it is mapped).
            map.check_unchanged().map_err(|e| {
                Error::io(self.dir.join(&c.file), std::io::Error::other(e.to_string()))
            })?;
            return result;
        }
        RECORD.with(|record| {
            let mut record = record.borrow_mut();
            if record.len() < len {
                record.resize(len, 0);
            }
            let record = &mut record[..len];
            self.files[column]
                .read_exact_at(record, meta.offset)
                .map_err(|e| Error::io(self.dir.join(&c.file), e))?;
            unseal_then(record, f)
        })
    }

    fn read_page_as(&self, column: usize, page: usize, narrow: bool) -> Result<ArrayRef> {
        let c = self.column_meta(column)?;
        self.check_page(page)?;
        let meta = &c.pages[page];
        let damaged = |detail: crate::error::Malformed| Error::PageDamaged {
            table: self.manifest.table.clone(),
            column: c.name.clone(),
            page,
            detail: detail.0,
        };
        let values = self.dictionary_values[column].as_ref();
        let rows = self.manifest.page_rows(page);
        let (array, encoding) = self
            .with_page_bytes(column, page, |bytes| {
                page::decode(
                    bytes,
                    rows,
                    c.logical,
                    c.nullable,
                    c.dictionary.as_deref(),
                    values.is_some(),
                    narrow,
                )
            })?
            .map_err(damaged)?;
        let array = match values {
            Some(values) => {
                let keys = array
                    .as_any()
                    .downcast_ref::<arrow_array::Int32Array>()
                    .ok_or_else(|| {
                        damaged(crate::error::Malformed(
                            "a dictionary page did not decode to codes".into(),
                        ))
                    })?
                    .clone();
                let dict = crate::arch::dictionary_array(keys, values.clone()).map_err(damaged)?;
                Arc::new(dict) as ArrayRef
            }
            None => array,
        };
        if encoding != meta.encoding || array.null_count() as u64 != meta.null_count {
            return Err(damaged(crate::error::malformed!(
                "it holds {} with {} nulls, the manifest says {} with {}",
                encoding.name(),
                array.null_count(),
                meta.encoding.name(),
                meta.null_count
            )));
        }
        Ok(array)
    }

    /// Reads `pages` (in the order given) of the columns in `projection`, one batch per page.
    /// Pages not listed are never read or unsealed. Column and page numbers are checked here,
    /// before anything is read.
    pub fn scan(&self, projection: &[usize], pages: &[usize]) -> Result<Scan<'_>> {
        for &c in projection {
            self.column_meta(c)?;
        }
        for &p in pages {
            self.check_page(p)?;
        }
        let schema = Arc::new(self.schema.project(projection).map_err(|e| Error::Arrow {
            table: self.manifest.table.clone(),
            detail: e.to_string(),
        })?);
        Ok(Scan {
            reader: self,
            projection: projection.to_vec(),
            pages: pages.to_vec(),
            next: 0,
            schema,
        })
    }

    /// The pages whose zone maps say `column` may hold a value in `lo ..= hi` (either bound
    /// may be absent). Every page that holds a matching non-null value is returned; pages that
    /// hold only nulls, or whose range misses the bounds, are not. Float pages holding NaN are
    /// always returned. Integers, dates (days) and decimals (the scaled integer) take
    /// [`Scalar::Int`] bounds, floats `F64` or `Int`, strings `Str` (byte order), booleans
    /// `Bool`.
    pub fn prune(
        &self,
        column: usize,
        lo: Option<&Scalar>,
        hi: Option<&Scalar>,
    ) -> Result<Vec<usize>> {
        let c = self.column_meta(column)?;
        for b in [lo, hi].into_iter().flatten() {
            let ok = matches!(
                (c.logical, b),
                (LogicalType::Float64, Scalar::F64(_) | Scalar::Int(_))
                    | (LogicalType::Utf8, Scalar::Str(_))
                    | (LogicalType::Boolean, Scalar::Bool(_))
            ) || (c.logical.is_integer() && matches!(b, Scalar::Int(_)));
            if !ok {
                return Err(Error::parameter(
                    format!("bound for column {}", c.name),
                    b,
                    format!("a bound of the column's type {:?}", c.logical),
                ));
            }
        }
        let below = |a: &Scalar, b: &Scalar| a.partial_cmp_to(b) == Some(std::cmp::Ordering::Less);
        Ok(c.pages
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                if p.has_nan {
                    return true;
                }
                let (Some(min), Some(max)) = (&p.min, &p.max) else {
                    return false;
                };
                !(lo.is_some_and(|lo| below(max, lo)) || hi.is_some_and(|hi| below(hi, min)))
            })
            .map(|(k, _)| k)
            .collect())
    }

    /// Per-column totals for `inspect`: record bytes, and pages by encoding.
    pub fn column_stats(&self, column: usize) -> Result<ColumnStats> {
        let c = self.column_meta(column)?;
        let mut stats = ColumnStats {
            bytes: c.file_len,
            ..ColumnStats::default()
        };
        for p in &c.pages {
            *stats.encodings.entry(p.encoding).or_default() += 1;
            stats.max_width = stats.max_width.max(p.width);
            stats.null_count += p.null_count;
        }
        Ok(stats)
    }
}

/// Totals over one column's pages.
#[derive(Clone, Debug, Default)]
pub struct ColumnStats {
    /// The column file's length.
    pub bytes: u64,
    /// Pages by encoding.
    pub encodings: std::collections::BTreeMap<Encoding, usize>,
    /// The widest page, in bits per value.
    pub max_width: u8,
    /// Nulls in the column.
    pub null_count: u64,
}

/// The iterator [`TableReader::scan`] returns: one [`RecordBatch`] per listed page.
pub struct Scan<'a> {
    reader: &'a TableReader,
    projection: Vec<usize>,
    pages: Vec<usize>,
    next: usize,
    schema: SchemaRef,
}

impl Scan<'_> {
    /// The schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let &page = self.pages.get(self.next)?;
        self.next += 1;
        let columns: Result<Vec<ArrayRef>> = self
            .projection
            .iter()
            .map(|&c| self.reader.read_page(c, page))
            .collect();
        Some(columns.and_then(|columns| {
            let options = RecordBatchOptions::new()
                .with_row_count(Some(self.reader.manifest.page_rows(page)));
            RecordBatch::try_new_with_options(self.schema.clone(), columns, &options).map_err(|e| {
                Error::Arrow {
                    table: self.reader.manifest.table.clone(),
                    detail: e.to_string(),
                }
            })
        }))
    }
}
/// The tables under `dir`: `dir` itself when it holds a manifest, else every subdirectory that
/// does, sorted by name.
pub fn table_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    if dir.join(MANIFEST_FILE).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut tables = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.join(MANIFEST_FILE).is_file() {
            tables.push(path);
        }
    }
    tables.sort();
    if tables.is_empty() {
        return Err(Error::NoTables {
            path: dir.to_path_buf(),
        });
    }
    Ok(tables)
}

/// Opens every table under `dir` (see [`table_dirs`]) with `keys`, each named by its
/// directory's name: what a SQL session registers and what the offload device serves.
pub fn open_table_dirs(dir: &Path, keys: &KeyRing) -> Result<Vec<(String, TableReader)>> {
    let mut opened = Vec::new();
    for path in table_dirs(dir)? {
        let reader = TableReader::open(&path, keys)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| reader.table().to_string());
        opened.push((name, reader));
    }
    Ok(opened)
}
