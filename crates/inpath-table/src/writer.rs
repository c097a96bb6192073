//! [`TableWriter`]: record batches in, a table directory out.

use crate::error::{Error, Result};
use crate::format::{
    self, column_file_name, ColumnMeta, LogicalType, Manifest, PageMeta, TierMeta,
    DEFAULT_ROWS_PER_PAGE, MANIFEST_FILE, MAX_ROWS_PER_PAGE, VERSION,
};
use crate::page::{self, Acc, Dict};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use inpath_core::output::OutputFile;
use inpath_seal::{Cipher, Compression, Key, SealConfig, Sealer};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// How a table is written.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Rows per page R (1 ..= 2^24; default 65,536).
    pub rows_per_page: usize,
    /// The sealing tier: `compression` applies to string heap pages and the manifest (integer,
    /// float, boolean and dictionary-code pages are sealed uncompressed: general-purpose codecs
    /// do not shrink bit-packed data); `cipher` applies to every record.
    pub seal: SealConfig,
    /// Key id and key, required unless the cipher is `None`.
    pub key: Option<(u32, Key)>,
    /// Replace an existing table directory (one holding a manifest and column files only).
    /// Other non-empty directories are always refused.
    pub overwrite: bool,
    /// Threads that encode and seal the columns of a page side by side.
    pub threads: usize,
    /// Fixed nonce prefix for reproducible output (tests only: never reuse one with a key).
    /// Column i's two sealers use this prefix with `2i` and `2i + 1` added to its last bytes.
    pub nonce_prefix: Option<[u8; 8]>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            rows_per_page: DEFAULT_ROWS_PER_PAGE,
            seal: SealConfig {
                compression: Compression::None,
                cipher: Cipher::None,
            },
            key: None,
            overwrite: false,
            threads: 1,
            nonce_prefix: None,
        }
    }
}

/// What [`TableWriter::finish`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSummary {
    /// The table's name.
    pub table: String,
    /// Rows written.
    pub rows: u64,
    /// Pages per column.
    pub pages: usize,
    /// Bytes of all files (manifest and column files).
    pub bytes: u64,
}

struct ColumnWriter {
    name: String,
    logical: LogicalType,
    nullable: bool,
    acc: Acc,
    dict: Option<Dict>,
    numeric: Sealer,
    heap: Sealer,
    file: OutputFile,
    path: PathBuf,
    offset: u64,
    pages: Vec<PageMeta>,
    page_buf: Vec<u8>,
    record: Vec<u8>,
}

impl ColumnWriter {
    /// Encodes, seals and writes the accumulated rows as one page.
    fn flush(&mut self) -> Result<()> {
        let enc = page::encode(
            &self.acc,
            self.logical,
            self.dict.as_mut(),
            &mut self.page_buf,
        );
        let sealer = if enc.encoding == format::Encoding::Heap {
            &mut self.heap
        } else {
            &mut self.numeric
        };
        sealer
            .seal_into(&self.page_buf, &mut self.record)
            .map_err(|source| Error::PageSeal {
                table: String::new(),
                column: self.name.clone(),
                page: self.pages.len(),
                source: Box::new(source),
            })?;
        self.file
            .write_all(&self.record)
            .map_err(|e| Error::io(&self.path, e))?;
        self.pages.push(PageMeta {
            offset: self.offset,
            len: self.record.len() as u64,
            encoding: enc.encoding,
            width: enc.width,
            null_count: self.acc.nulls as u64,
            min: enc.min,
            max: enc.max,
            has_nan: enc.has_nan,
        });
        self.offset += self.record.len() as u64;
        self.acc.clear();
        Ok(())
    }
}

/// Writes one table: feed [`RecordBatch`]es of any size with [`TableWriter::write`], then
/// [`TableWriter::finish`].
///
/// Pages are cut every R rows whatever the batch sizes (a partial page is carried to the next
/// batch), so any chunking of the same rows gives byte-identical column files (with a fixed
/// nonce prefix, or without encryption). Files are written to a hidden staging directory beside
/// the target (each through `inpath_core::output`: write aside, fsync, rename), which is renamed
/// into place by `finish`; a writer dropped before `finish`, or a failed `finish`, leaves no
/// table behind.
pub struct TableWriter {
    table: String,
    target: PathBuf,
    staging: PathBuf,
    schema: SchemaRef,
    options: WriteOptions,
    columns: Vec<ColumnWriter>,
    rows: u64,
    finished: bool,
}

fn nonce_for(prefix: [u8; 8], n: u64) -> [u8; 8] {
    u64::from_be_bytes(prefix).wrapping_add(n).to_be_bytes()
}

impl TableWriter {
    /// Starts a table at directory `dir` (its name is the table's name) with `schema`.
    pub fn create(dir: &Path, schema: SchemaRef, options: WriteOptions) -> Result<TableWriter> {
        let table = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        if options.rows_per_page == 0 || options.rows_per_page > MAX_ROWS_PER_PAGE {
            return Err(Error::parameter(
                "rows per page",
                options.rows_per_page,
                format!("1 to {MAX_ROWS_PER_PAGE}"),
            ));
        }
        check_target(dir, options.overwrite)?;
        let mut logicals = Vec::new();
        for field in schema.fields() {
            let logical = LogicalType::from_arrow(field.data_type()).ok_or_else(|| {
                Error::UnsupportedType {
                    table: table.clone(),
                    column: field.name().clone(),
                    data_type: field.data_type().to_string(),
                }
            })?;
            logicals.push(logical);
        }
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let staging = make_staging(&parent, &table)?;
        let mut writer = TableWriter {
            table: table.clone(),
            target: dir.to_path_buf(),
            staging: staging.clone(),
            schema: schema.clone(),
            options: options.clone(),
            columns: Vec::new(),
            rows: 0,
            finished: false,
        };
        let key = options.key.as_ref().map(|(id, k)| (*id, k));
        let seal_err = |source| Error::Seal {
            table: table.clone(),
            source,
        };
        for (i, (field, logical)) in schema.fields().iter().zip(logicals).enumerate() {
            let numeric_cfg = SealConfig {
                compression: Compression::None,
                cipher: options.seal.cipher,
            };
            let (numeric, heap) = match options.nonce_prefix {
                Some(p) => (
                    Sealer::with_nonce_prefix(numeric_cfg, key, nonce_for(p, 2 * i as u64 + 2)),
                    Sealer::with_nonce_prefix(options.seal, key, nonce_for(p, 2 * i as u64 + 3)),
                ),
                None => (
                    Sealer::new(numeric_cfg, key),
                    Sealer::new(options.seal, key),
                ),
            };
            let path = staging.join(column_file_name(i));
            let mut file = OutputFile::create(&path, &[])?;
            file.write_all(&format::column_header(i))
                .map_err(|e| Error::io(&path, e))?;
            writer.columns.push(ColumnWriter {
                name: field.name().clone(),
                logical,
                nullable: field.is_nullable(),
                acc: Acc::new(logical),
                dict: (logical == LogicalType::Utf8).then(Dict::default),
                numeric: numeric.map_err(seal_err)?,
                heap: heap.map_err(seal_err)?,
                file,
                path,
                offset: format::COLUMN_HEADER as u64,
                pages: Vec::new(),
                page_buf: Vec::new(),
                record: Vec::new(),
            });
        }
        Ok(writer)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Appends a batch (any number of rows). Its columns must have the table schema's types
    /// (Utf8, LargeUtf8 and Utf8View are interchangeable); a column declared not nullable must
    /// have no nulls.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mismatch = |detail: String| Error::SchemaMismatch {
            table: self.table.clone(),
            detail,
        };
        if batch.num_columns() != self.columns.len() {
            return Err(mismatch(format!(
                "{} columns, the table has {}",
                batch.num_columns(),
                self.columns.len()
            )));
        }
        for (c, array) in self.columns.iter().zip(batch.columns()) {
            if LogicalType::from_arrow(array.data_type()) != Some(c.logical) {
                return Err(mismatch(format!(
                    "column {} is {}, the table stores {:?}",
                    c.name,
                    array.data_type(),
                    c.logical
                )));
            }
            if !c.nullable && array.null_count() > 0 {
                return Err(mismatch(format!(
                    "column {} is not nullable but the batch has {} nulls",
                    c.name,
                    array.null_count()
                )));
            }
        }
        let r = self.options.rows_per_page;
        let n = batch.num_rows();
        let mut at = 0;
        while at < n {
            let pending = self.columns.first().map_or(0, |c| c.acc.len());
            let take = (r - pending).min(n - at);
            for (c, array) in self.columns.iter_mut().zip(batch.columns()) {
                if !c.acc.append(array.as_ref(), at, take) {
                    return Err(Error::SchemaMismatch {
                        table: self.table.clone(),
                        detail: format!("column {} has an unexpected array type", c.name),
                    });
                }
            }
            at += take;
            self.rows += take as u64;
            if pending + take == r {
                self.flush_page()?;
            }
        }
        // A table without columns still counts its rows.
        Ok(())
    }

    /// Writes the accumulated rows of every column as one page.
    fn flush_page(&mut self) -> Result<()> {
        let rows = self.columns.first().map_or(0, |c| c.acc.len());
        if rows == 0 {
            return Ok(());
        }
        let threads = self.options.threads.max(1).min(self.columns.len());
        let table = self.table.clone();
        let name = |e: Error| match e {
            Error::PageSeal {
                column,
                page,
                source,
                ..
            } => Error::PageSeal {
                table: table.clone(),
                column,
                page,
                source,
            },
            other => other,
        };
        if threads <= 1 || rows < 4096 {
            for c in &mut self.columns {
                c.flush().map_err(name)?;
            }
            return Ok(());
        }
        let cells: Vec<Mutex<&mut ColumnWriter>> =
            self.columns.iter_mut().map(Mutex::new).collect();
        let next = AtomicUsize::new(0);
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(cell) = cells.get(i) else { break };
                    let mut c = cell.lock().unwrap_or_else(|p| p.into_inner());
                    if let Err(e) = c.flush() {
                        first_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                });
            }
        });
        match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(name(e)),
            None => Ok(()),
        }
    }

    /// Writes the last (partial) page and the manifest, and moves the table into place.
    pub fn finish(mut self) -> Result<TableSummary> {
        self.flush_page()?;
        let mut columns_meta = Vec::new();
        let mut bytes = 0u64;
        for (i, c) in std::mem::take(&mut self.columns).into_iter().enumerate() {
            c.file.commit()?;
            bytes += c.offset;
            // A column has a dictionary when any page uses it (even an empty one: a page of
            // nulls only).
            let dictionary = c
                .dict
                .filter(|_| {
                    c.pages
                        .iter()
                        .any(|p| p.encoding == format::Encoding::Dictionary)
                })
                .map(|d| d.values);
            columns_meta.push(ColumnMeta {
                name: c.name,
                logical: c.logical,
                nullable: c.nullable,
                file: column_file_name(i),
                file_len: c.offset,
                dictionary,
                pages: c.pages,
            });
        }
        let manifest = Manifest {
            version: VERSION,
            table: self.table.clone(),
            rows_per_page: self.options.rows_per_page as u64,
            row_count: self.rows,
            tier: TierMeta {
                compression: self.options.seal.compression.describe(),
                cipher: self.options.seal.cipher.name().to_string(),
                key_id: match self.options.seal.cipher {
                    Cipher::None => 0,
                    _ => self.options.key.as_ref().map_or(0, |k| k.0),
                },
            },
            columns: columns_meta,
        };
        let pages = manifest.page_count();
        let json = serde_json::to_vec(&manifest).map_err(|e| Error::ManifestDamaged {
            table: self.table.clone(),
            detail: format!("serializing: {e}"),
        })?;
        let key = self.options.key.as_ref().map(|(id, k)| (*id, k));
        let mut sealer = match self.options.nonce_prefix {
            Some(p) => Sealer::with_nonce_prefix(self.options.seal, key, nonce_for(p, 1)),
            None => Sealer::new(self.options.seal, key),
        }
        .map_err(|source| Error::Seal {
            table: self.table.clone(),
            source,
        })?;
        let record = sealer.seal(&json).map_err(|source| Error::ManifestSeal {
            table: self.table.clone(),
            source,
        })?;
        let file = format::manifest_file(&record, self.options.seal.cipher != Cipher::None);
        bytes += file.len() as u64;
        inpath_core::output::write_file(&self.staging.join(MANIFEST_FILE), &file, &[])?;
        install(&self.staging, &self.target, self.options.overwrite)?;
        self.finished = true;
        Ok(TableSummary {
            table: self.table.clone(),
            rows: self.rows,
            pages,
            bytes,
        })
    }

    /// The schema the writer was created with.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

impl Drop for TableWriter {
    fn drop(&mut self) {
        if !self.finished {
            // Column files remove their own temporaries; the staging directory is ours.
            self.columns.clear();
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Whether `dir` looks like a table directory: a manifest, column files, nothing else.
fn is_table_dir(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut manifest = false;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == MANIFEST_FILE {
            manifest = true;
        } else if !(name.ends_with(".col") && e.file_type().is_ok_and(|t| t.is_file())) {
            return false;
        }
    }
    manifest
}

fn check_target(dir: &Path, overwrite: bool) -> Result<()> {
    match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(dir, e)),
        Ok(mut entries) => {
            if entries.next().is_none() {
                return Ok(());
            }
            if !overwrite {
                return Err(Error::OutputExists {
                    path: dir.to_path_buf(),
                    detail: "refusing to write into it (overwrite a table with --force)".into(),
                });
            }
            if !is_table_dir(dir) {
                return Err(Error::OutputExists {
                    path: dir.to_path_buf(),
                    detail: "it is not a table directory (a manifest and *.col files), so it \
                             is never replaced"
                        .into(),
                });
            }
            Ok(())
        }
    }
}

fn make_staging(parent: &Path, table: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let pid = std::process::id();
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = parent.join(format!(".{table}.{pid:x}{nanos:08x}{n:x}.inpath-tmp"));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io(&path, e)),
        }
    }
    Err(Error::io(
        parent,
        std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free staging name"),
    ))
}

/// Renames the finished staging directory over `target` (an absent or empty directory, or an
/// old table when overwriting), then syncs the parent directory.
fn install(staging: &Path, target: &Path, overwrite: bool) -> Result<()> {
    check_target(target, overwrite)?;
    let parent = staging.parent().unwrap_or(Path::new("."));
    let old = if target.exists() && is_table_dir(target) {
        let old = parent.join(format!(
            ".{}.old.inpath-tmp",
            staging
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        ));
        std::fs::rename(target, &old).map_err(|e| Error::io(target, e))?;
        Some(old)
    } else {
        None
    };
    if let Err(e) = std::fs::rename(staging, target) {
        if let Some(old) = &old {
            let _ = std::fs::rename(old, target);
        }
        return Err(Error::io(target, e));
    }
    if let Some(old) = old {
        let _ = std::fs::remove_dir_all(old);
    }
    if let Ok(d) = std::fs::File::open(target) {
        let _ = d.sync_all();
    }
    if let Ok(d) = std::fs::File::open(parent) {
        let _ = d.sync_all();
    }
    Ok(())
}
