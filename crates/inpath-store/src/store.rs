//! The page store: a directory with a catalog and one data file per handle generation.
//!
//! ```text
//! DIR/catalog              the catalog (see [`crate::catalog`])
//! DIR/pages/ID-GEN.pages   the pages of handle ID, generation GEN, at the places the
//!                          handle's extent map names (raw pages, or one seal record per page)
//! ```
//!
//! A put writes the data file aside and renames it into place (`inpath_core::output`), then
//! rewrites the catalog the same way; only then is the previous generation's data file removed.
//! So a failure at any point (a full disk, a bad input, a wrong key) leaves the store as it was.
//! One process changes a store at a time; readers see the catalog they loaded.

use crate::catalog::{Catalog, Entry, Extent, HandleRef, Tier, MAX_NAME, MAX_PAGE, MIN_PAGE};
use crate::error::{Result, StoreError};
use inpath_core::output::OutputFile;
use inpath_core::source::Mapping;
use inpath_core::Input;
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig, Sealer, Unsealer, Workspace};
use std::fs::File;
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The default page size: 8 KiB, as BlueDBM's flash pages.
pub const DEFAULT_PAGE_SIZE: u32 = 8192;

/// How [`Store::put_reader`] stores a file.
#[derive(Clone, Copy, Debug)]
pub struct PutOptions<'k> {
    /// Page size in bytes ([`MIN_PAGE`] ..= [`MAX_PAGE`]).
    pub page_size: u32,
    /// Seal each page with this configuration and key (id, key); `None` stores raw pages. The
    /// key may be `None` only when the cipher is [`Cipher::None`] (compression alone).
    pub seal: Option<(SealConfig, Option<(u32, &'k Key)>)>,
}

impl Default for PutOptions<'_> {
    fn default() -> Self {
        PutOptions {
            page_size: DEFAULT_PAGE_SIZE,
            seal: None,
        }
    }
}

/// A page store opened on a directory.
pub struct Store {
    dir: PathBuf,
    catalog: Catalog,
    unsealer: Option<Arc<Unsealer>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("handles", &self.catalog.entries.len())
            .field("keys", &self.unsealer.is_some())
            .finish()
    }
}

impl Store {
    /// Opens the store in `dir`, creating the directory and an empty catalog if there is none.
    pub fn create(dir: &Path) -> Result<Store> {
        let pages = dir.join("pages");
        std::fs::create_dir_all(&pages).map_err(|source| StoreError::Write {
            path: pages.clone(),
            source,
        })?;
        match Catalog::load(dir) {
            Err(StoreError::NotAStore { .. }) => Catalog::new().save(dir)?,
            Err(other) => return Err(other),
            Ok(_) => {}
        }
        Store::open(dir)
    }

    /// Opens an existing store (its catalog is read and checked).
    pub fn open(dir: &Path) -> Result<Store> {
        let catalog = Catalog::load(dir)?;
        Ok(Store {
            dir: dir.to_path_buf(),
            catalog,
            unsealer: None,
        })
    }

    /// Gives the store the keys that sealed pages are read with.
    pub fn with_keys(mut self, ring: &KeyRing) -> Store {
        self.unsealer = Some(Arc::new(Unsealer::new(ring)));
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The handles, in increasing id.
    pub fn entries(&self) -> &[Entry] {
        &self.catalog.entries
    }

    /// A handle as a user writes it: `ID`, `ID@GENERATION`, or the name the file was put under
    /// (its current generation). Digits are always an id: a file named `12` is reached by its
    /// handle. An unknown name is [`StoreError::UnknownName`].
    pub fn handle_ref(&self, text: &str) -> Result<HandleRef> {
        if let Ok(h) = HandleRef::parse(text) {
            return Ok(h);
        }
        self.catalog
            .entries
            .iter()
            .find(|e| e.name == text)
            .map(|e| HandleRef::from(e.handle))
            .ok_or_else(|| StoreError::UnknownName {
                name: text.to_string(),
                dir: self.dir.clone(),
            })
    }

    /// The entry `handle` names, or [`StoreError::UnknownHandle`] / [`StoreError::StaleHandle`].
    pub fn resolve(&self, handle: HandleRef) -> Result<&Entry> {
        let entry = self
            .catalog
            .entries
            .binary_search_by_key(&handle.id, |e| e.handle)
            .map(|i| &self.catalog.entries[i])
            .map_err(|_| StoreError::UnknownHandle {
                handle: handle.id,
                dir: self.dir.clone(),
            })?;
        match handle.generation {
            Some(g) if g != entry.generation => Err(StoreError::StaleHandle {
                handle: handle.id,
                asked: g,
                current: entry.generation,
            }),
            _ => Ok(entry),
        }
    }

    fn data_path(&self, entry: &Entry) -> PathBuf {
        self.dir.join("pages").join(entry.data_file_name())
    }

    /// Stores the file at `path` under `name` (its file name when `None`). See
    /// [`Store::put_reader`].
    pub fn put_file(
        &mut self,
        path: &Path,
        name: Option<&str>,
        options: &PutOptions<'_>,
    ) -> Result<Entry> {
        let name = match name {
            Some(n) => n.to_string(),
            None => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string()),
        };
        let file = File::open(path).map_err(|source| StoreError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.put_inner(
            file,
            path,
            &name,
            options,
            &[Input::File(path.to_path_buf())],
        )
    }

    /// Stores everything `reader` gives under `name`. A name already in the store keeps its
    /// handle id and gets the next generation (the old pages are removed once the new catalog
    /// is in place); a new name gets a new handle id. Returns the new entry.
    pub fn put_reader(
        &mut self,
        reader: impl Read,
        name: &str,
        options: &PutOptions<'_>,
    ) -> Result<Entry> {
        self.put_inner(reader, Path::new("the input"), name, options, &[])
    }

    fn put_inner(
        &mut self,
        reader: impl Read,
        shown: &Path,
        name: &str,
        options: &PutOptions<'_>,
        inputs: &[Input],
    ) -> Result<Entry> {
        if !(MIN_PAGE..=MAX_PAGE).contains(&options.page_size) {
            return Err(StoreError::parameter(
                "page size",
                options.page_size,
                &format!("{MIN_PAGE} to {MAX_PAGE} bytes"),
            ));
        }
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(StoreError::parameter(
                "name",
                name,
                &format!("1 to {MAX_NAME} bytes"),
            ));
        }
        let mut sealer = match options.seal {
            None => None,
            Some((config, key)) => {
                if key.is_none() && config.cipher != Cipher::None {
                    return Err(StoreError::parameter(
                        "key",
                        "none",
                        &format!("a key for cipher {}", config.cipher.name()),
                    ));
                }
                Some(
                    Sealer::new(config, key)
                        .map_err(|source| StoreError::Seal { page: 0, source })?,
                )
            }
        };
        let previous = self.catalog.entries.iter().position(|e| e.name == name);
        let (handle, generation) = match previous {
            Some(i) => (
                self.catalog.entries[i].handle,
                self.catalog.entries[i].generation + 1,
            ),
            None => (self.catalog.next_handle, 1),
        };
        let codec = match &options.seal {
            None => "raw".to_string(),
            Some((config, key)) => codec_text(config, key.map_or(0, |(_, k)| k.len() * 8)),
        };
        let mut entry = Entry {
            handle,
            generation,
            name: name.to_string(),
            size: 0,
            page_size: options.page_size,
            tier: if options.seal.is_some() {
                Tier::Sealed
            } else {
                Tier::Raw
            },
            codec,
            extents: Default::default(),
        };
        let path = self.data_path(&entry);
        let mut out = OutputFile::create(&path, inputs)?;
        let (size, extents) = write_pages(
            reader,
            &mut out,
            shown,
            &path,
            options.page_size,
            sealer.as_mut(),
        )?;
        out.commit()?;
        entry.size = size;
        entry.extents = Arc::new(extents);

        let mut catalog = self.catalog.clone();
        match previous {
            Some(i) => catalog.entries[i] = entry.clone(),
            None => {
                catalog.next_handle += 1;
                catalog.entries.push(entry.clone());
            }
        }
        if let Err(e) = catalog.save(&self.dir) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        if let Some(i) = previous {
            let old = self.data_path(&self.catalog.entries[i]);
            let _ = std::fs::remove_file(old);
        }
        self.catalog = catalog;
        Ok(entry)
    }

    /// Removes a handle: its catalog entry, then its data file. Returns the entry removed.
    pub fn remove(&mut self, handle: HandleRef) -> Result<Entry> {
        let entry = self.resolve(handle)?.clone();
        let mut catalog = self.catalog.clone();
        catalog.entries.retain(|e| e.handle != entry.handle);
        catalog.save(&self.dir)?;
        self.catalog = catalog;
        let _ = std::fs::remove_file(self.data_path(&entry));
        Ok(entry)
    }

    /// Opens a handle for reading pages (what the reader and the kernels use).
    pub fn open_handle(&self, handle: HandleRef) -> Result<Arc<OpenHandle>> {
        let entry = self.resolve(handle)?.clone();
        if entry.tier == Tier::Sealed && self.unsealer.is_none() {
            return Err(StoreError::KeyNeeded {
                handle: entry.handle,
                codec: entry.codec.clone(),
            });
        }
        let path = self.data_path(&entry);
        let file = File::open(&path).map_err(|source| StoreError::Read {
            path: path.clone(),
            source,
        })?;
        Ok(Arc::new(OpenHandle {
            entry,
            file,
            path,
            unsealer: self.unsealer.clone(),
            mapping: OnceLock::new(),
            direct: OnceLock::new(),
        }))
    }

    /// Reads `length` bytes at `offset` of a handle (the range must lie inside the file).
    pub fn read(&self, handle: HandleRef, offset: u64, length: u64) -> Result<Vec<u8>> {
        self.open_handle(handle)?.read(offset, length)
    }
}

/// The codec text of a seal configuration: `COMPRESSION+CIPHER` (`deflate-1+aes256-gcm`), as the
/// CLI spells them.
fn codec_text(config: &SealConfig, key_bits: usize) -> String {
    let cipher = match config.cipher {
        Cipher::None => "none".to_string(),
        c => format!("aes{key_bits}-{}", c.name()),
    };
    let compression = match config.compression {
        Compression::None => "none".to_string(),
        c => c.describe(),
    };
    format!("{compression}+{cipher}")
}

/// Reads `reader` page by page, seals each page when asked, and writes the pages back to back
/// to `out`; returns the size read and the extent map. `shown` names the input and `path` the
/// output in errors.
fn write_pages(
    mut reader: impl Read,
    out: &mut impl Write,
    shown: &Path,
    path: &Path,
    page_size: u32,
    mut sealer: Option<&mut Sealer>,
) -> Result<(u64, Vec<Extent>)> {
    let mut page = vec![0u8; page_size as usize];
    let mut record = Vec::new();
    let mut extents = Vec::new();
    let mut size = 0u64;
    let mut at = 0u64;
    loop {
        let n = read_full(&mut reader, &mut page).map_err(|source| StoreError::Read {
            path: shown.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        let stored: &[u8] = match sealer.as_deref_mut() {
            None => &page[..n],
            Some(s) => {
                record.clear();
                s.seal_into(&page[..n], &mut record)
                    .map_err(|source| StoreError::Seal {
                        page: extents.len() as u64,
                        source,
                    })?;
                &record
            }
        };
        out.write_all(stored).map_err(|source| StoreError::Write {
            path: path.to_path_buf(),
            source,
        })?;
        extents.push(Extent {
            offset: at,
            len: stored.len() as u32,
        });
        at += stored.len() as u64;
        size += n as u64;
        if n < page.len() {
            break;
        }
    }
    Ok((size, extents))
}

fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A handle opened for reading: its entry, its data file, and the keys for sealed pages.
/// Shared by the reader's workers (`pread`, no shared file position).
pub struct OpenHandle {
    entry: Entry,
    file: File,
    path: PathBuf,
    unsealer: Option<Arc<Unsealer>>,
    /// The data file mapped read-only, made on first use by the mapped read path (`None`
    /// inside when it cannot be mapped; the reader is used then).
    mapping: OnceLock<Option<Mapping>>,
    /// The data file opened with `O_DIRECT`, made on first use by a direct reader.
    direct: OnceLock<std::io::Result<File>>,
}

/// Alignment of `O_DIRECT` reads: offsets, lengths and buffers (the logical block size of
/// every common device divides it).
pub const DIRECT_ALIGN: usize = 4096;

/// What one worker (or lane) reuses from read to read: the stored bytes of a sealed run, the
/// page being unsealed and the codec contexts.
#[derive(Default)]
pub struct RunBuffers {
    stored: Vec<u8>,
    page: Vec<u8>,
    ws: Workspace,
}

impl std::fmt::Debug for RunBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBuffers").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for OpenHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenHandle")
            .field("entry", &self.entry.handle)
            .field("path", &self.path)
            .finish()
    }
}

impl OpenHandle {
    /// The handle's catalog entry.
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    /// Checks that `offset..offset+length` lies inside the file.
    pub fn check_range(&self, offset: u64, length: u64) -> Result<()> {
        match offset.checked_add(length) {
            Some(end) if end <= self.entry.size => Ok(()),
            _ => Err(StoreError::RangePastEnd {
                handle: self.entry.handle,
                offset,
                length,
                size: self.entry.size,
            }),
        }
    }

    /// Reads logical page `page` (unsealed when sealed) into `out`, replacing its contents.
    pub fn read_page(&self, page: u64, out: &mut Vec<u8>) -> Result<()> {
        self.check_page(page)?;
        let mut bufs = RunBuffers::default();
        let got = self.read_run(page..page + 1, false, out, &mut bufs)?;
        if got.start > 0 {
            out.copy_within(got.clone(), 0);
        }
        out.truncate(got.len());
        Ok(())
    }

    fn check_page(&self, page: u64) -> Result<()> {
        let e = &self.entry;
        if page < e.pages() {
            return Ok(());
        }
        Err(StoreError::RangePastEnd {
            handle: e.handle,
            offset: page.saturating_mul(e.page_size as u64),
            length: e.page_size as u64,
            size: e.size,
        })
    }

    fn damaged(&self, page: u64, detail: String) -> StoreError {
        StoreError::PageDamaged {
            handle: self.entry.handle,
            page,
            detail,
        }
    }

    fn truncated(&self, page: u64, end: u64) -> StoreError {
        self.damaged(
            page,
            format!(
                "the data file {} ends before byte {end} (a truncated data file)",
                self.path.display()
            ),
        )
    }

    /// The end of the longest run of pages from `first` (which must exist), below `last`,
    /// stored back to back in the data file with at most `max_stored` stored bytes (always at
    /// least one page): what one read can fetch.
    pub fn run_end(&self, first: u64, last: u64, max_stored: u64) -> u64 {
        let ex = &self.entry.extents;
        let last = last.min(ex.len() as u64);
        let mut end = first + 1;
        let mut stored = ex[first as usize].len as u64;
        while end < last {
            let prev = ex[end as usize - 1];
            let next = ex[end as usize];
            if next.offset != prev.offset + prev.len as u64 || stored + next.len as u64 > max_stored
            {
                break;
            }
            stored += next.len as u64;
            end += 1;
        }
        end
    }

    /// The stored bytes of pages `pages` (a run from [`OpenHandle::run_end`]) in the data file.
    fn stored_span(&self, pages: &Range<u64>) -> (u64, u64) {
        let ex = &self.entry.extents;
        let first = ex[pages.start as usize];
        let last = ex[pages.end as usize - 1];
        (first.offset, last.offset + last.len as u64 - first.offset)
    }

    /// Reads the run of pages `pages` (from [`OpenHandle::run_end`]) with one read, into
    /// `out`, and returns where in `out` their bytes (unsealed when sealed) are. `direct` reads
    /// with `O_DIRECT` (aligned, past the page cache). `out` keeps its memory from call to
    /// call; `bufs` holds what a sealed run needs besides.
    pub fn read_run(
        &self,
        pages: Range<u64>,
        direct: bool,
        out: &mut Vec<u8>,
        bufs: &mut RunBuffers,
    ) -> Result<Range<usize>> {
        self.check_page(pages.end - 1)?;
        let (at, len) = self.stored_span(&pages);
        match self.entry.tier {
            Tier::Raw => {
                let lo = self.pread(at, len as usize, direct, out, pages.start)?;
                Ok(lo..lo + len as usize)
            }
            Tier::Sealed => {
                let mut stored = std::mem::take(&mut bufs.stored);
                let got = self
                    .pread(at, len as usize, direct, &mut stored, pages.start)
                    .and_then(|lo| {
                        out.clear();
                        let mut from = lo;
                        for p in pages.clone() {
                            let n = self.entry.extents[p as usize].len as usize;
                            self.unseal_page(p, &stored[from..from + n], bufs)?;
                            out.extend_from_slice(&bufs.page);
                            from += n;
                        }
                        Ok(0..out.len())
                    });
                bufs.stored = stored;
                got
            }
        }
    }

    /// Unseals the stored record of page `page` into `bufs.page`, checking its length.
    fn unseal_page(&self, page: u64, record: &[u8], bufs: &mut RunBuffers) -> Result<()> {
        let e = &self.entry;
        let unsealer = self
            .unsealer
            .as_ref()
            .ok_or_else(|| StoreError::KeyNeeded {
                handle: e.handle,
                codec: e.codec.clone(),
            })?;
        let used = unsealer
            .unseal_prefix_into(record, &mut bufs.ws, &mut bufs.page)
            .map_err(|source| StoreError::Unseal {
                handle: e.handle,
                page,
                source,
            })?;
        if used != record.len() {
            return Err(self.damaged(
                page,
                format!(
                    "the seal record is {used} bytes, the catalog says {}",
                    record.len()
                ),
            ));
        }
        let want = e.page_len(page) as usize;
        if bufs.page.len() != want {
            return Err(self.damaged(
                page,
                format!(
                    "unsealed to {} bytes, the catalog says {want}",
                    bufs.page.len()
                ),
            ));
        }
        Ok(())
    }

    /// Reads `len` bytes at `at` of the data file into `buf` and returns where they start in
    /// it: 0 for a plain `pread`, the aligned offset for `O_DIRECT`. `page` names the run's
    /// first page in errors.
    fn pread(
        &self,
        at: u64,
        len: usize,
        direct: bool,
        buf: &mut Vec<u8>,
        page: u64,
    ) -> Result<usize> {
        let io_error = |source: std::io::Error| StoreError::Read {
            path: self.path.clone(),
            source,
        };
        if !direct {
            // Growing zero-fills; a reused buffer of the same size is not touched.
            if buf.len() < len {
                buf.resize(len, 0);
            }
            return match self.file.read_exact_at(&mut buf[..len], at) {
                Ok(()) => Ok(0),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Err(self.truncated(page, at + len as u64))
                }
                Err(e) => Err(io_error(e)),
            };
        }
        let file = self.direct_file()?;
        let a = DIRECT_ALIGN as u64;
        let start = at / a * a;
        let end = (at + len as u64).div_ceil(a) * a;
        let n = (end - start) as usize;
        if buf.len() < n + DIRECT_ALIGN {
            buf.resize(n + DIRECT_ALIGN, 0);
        }
        let pad = buf.as_ptr().align_offset(DIRECT_ALIGN);
        let need = (at + len as u64 - start) as usize;
        let mut got = 0usize;
        while got < need {
            // Whole aligned blocks each time; the last read may stop at the end of the file.
            match file.read_at(&mut buf[pad + got..pad + n], start + got as u64) {
                Ok(0) => return Err(self.truncated(page, at + len as u64)),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
            if !got.is_multiple_of(DIRECT_ALIGN) && got < need {
                return Err(self.truncated(page, at + len as u64));
            }
        }
        Ok(pad + (at - start) as usize)
    }

    fn direct_file(&self) -> Result<&File> {
        let opened = self.direct.get_or_init(|| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&self.path)
        });
        opened.as_ref().map_err(|e| StoreError::Read {
            path: self.path.clone(),
            source: std::io::Error::new(
                e.kind(),
                format!(
                    "cannot open it for direct I/O (O_DIRECT): {e}; read through the page cache instead"
                ),
            ),
        })
    }

    /// The data file mapped read-only (made once; `None` when it cannot be mapped, or is
    /// empty).
    pub fn mapping(&self) -> Option<&Mapping> {
        self.mapping
            .get_or_init(|| {
                let file = self.file.try_clone().ok()?;
                Mapping::map(file, &self.path)
            })
            .as_ref()
    }

    /// Feeds the bytes `range` of the handle to `feed` from the mapped data file, in runs of
    /// pages stored back to back of at most `max_run` bytes (unsealed page by page when
    /// sealed, in this thread), until `feed` returns `false`. Returns the number of pages
    /// read, or `None` when the file cannot be mapped (the caller reads through the reader
    /// instead).
    pub fn feed_mapped(
        &self,
        range: Range<u64>,
        max_run: u64,
        bufs: &mut RunBuffers,
        mut feed: impl FnMut(u64, &[u8]) -> bool,
    ) -> Result<Option<u64>> {
        if range.is_empty() {
            return Ok(Some(0));
        }
        self.check_range(range.start, range.end - range.start)?;
        let Some(map) = self.mapping() else {
            return Ok(None);
        };
        let mut pages = 0u64;
        let bytes = map.bytes();
        let ps = self.entry.page_size as u64;
        let last = range.end.div_ceil(ps);
        let mut p = range.start / ps;
        while p < last {
            let end = match self.entry.tier {
                Tier::Raw => self.run_end(p, last, max_run),
                Tier::Sealed => p + 1,
            };
            let (at, len) = self.stored_span(&(p..end));
            let Some(stored) = bytes.get(at as usize..(at + len) as usize) else {
                return Err(self.truncated(p, at + len));
            };
            let plain = match self.entry.tier {
                Tier::Raw => stored,
                Tier::Sealed => {
                    self.unseal_page(p, stored, bufs)?;
                    &bufs.page[..]
                }
            };
            let base = p * ps;
            let lo = range.start.max(base);
            let hi = range.end.min(base + plain.len() as u64);
            pages += end - p;
            if !feed(lo, &plain[(lo - base) as usize..(hi - base) as usize]) {
                break;
            }
            p = end;
        }
        map.check_unchanged().map_err(|e| StoreError::Read {
            path: self.path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(Some(pages))
    }

    /// Hands logical page `page` (unsealed when sealed) to `f` straight from the mapped data
    /// file: no system call and no copy for a raw page. `Ok(None)` when the file cannot be
    /// mapped (read with [`OpenHandle::read_page`] instead). Unlike
    /// [`OpenHandle::feed_mapped`] it does not check the file's length after each call: a
    /// caller reading many pages calls [`OpenHandle::check_mapping`] once at the end.
    pub fn with_mapped_page<R>(
        &self,
        page: u64,
        bufs: &mut RunBuffers,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.check_page(page)?;
        let Some(map) = self.mapping() else {
            return Ok(None);
        };
        let (at, len) = self.stored_span(&(page..page + 1));
        let Some(stored) = map.bytes().get(at as usize..(at + len) as usize) else {
            return Err(self.truncated(page, at + len));
        };
        Ok(Some(match self.entry.tier {
            Tier::Raw => f(stored),
            Tier::Sealed => {
                self.unseal_page(page, stored, bufs)?;
                f(&bufs.page)
            }
        }))
    }

    /// After reads through [`OpenHandle::with_mapped_page`]: an error if the data file shrank
    /// while it was mapped (what was read may then be zeros, not the file).
    pub fn check_mapping(&self) -> Result<()> {
        match self.mapping.get() {
            Some(Some(map)) => map.check_unchanged().map_err(|e| StoreError::Read {
                path: self.path.clone(),
                source: std::io::Error::other(e.to_string()),
            }),
            _ => Ok(()),
        }
    }

    /// Reads `length` bytes at `offset` (the range must lie inside the file), page by page.
    pub fn read(&self, offset: u64, length: u64) -> Result<Vec<u8>> {
        self.check_range(offset, length)?;
        let mut out = Vec::with_capacity(length as usize);
        if length == 0 {
            return Ok(out);
        }
        let ps = self.entry.page_size as u64;
        let end = offset + length;
        let mut page = Vec::new();
        for p in offset / ps..end.div_ceil(ps) {
            self.read_page(p, &mut page)?;
            let start = p * ps;
            let lo = offset.max(start) - start;
            let hi = end.min(start + page.len() as u64) - start;
            out.extend_from_slice(&page[lo as usize..hi as usize]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_fails_the_put_with_the_write_error() {
        // /dev/full fails every write with ENOSPC.
        let Ok(mut full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            eprintln!("skipped: /dev/full is not available here");
            return;
        };
        let data = vec![7u8; 20_000];
        let err = write_pages(
            &data[..],
            &mut full,
            Path::new("in"),
            Path::new("/dev/full"),
            8192,
            None,
        )
        .unwrap_err();
        match &err {
            StoreError::Write { path, source } => {
                assert_eq!(path, Path::new("/dev/full"));
                assert_eq!(source.raw_os_error(), Some(28), "{source}"); // ENOSPC
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(err.to_string(), "cannot write /dev/full");
    }

    #[test]
    fn a_failing_input_fails_the_put_and_leaves_the_store_unchanged() {
        struct Broken(usize);
        impl Read for Broken {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk on fire"));
                }
                let n = buf.len().min(self.0);
                self.0 -= n;
                buf[..n].fill(1);
                Ok(n)
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::create(dir.path()).unwrap();
        let before = std::fs::read(dir.path().join("catalog")).unwrap();
        let err = store
            .put_reader(Broken(30_000), "x", &PutOptions::default())
            .unwrap_err();
        assert!(matches!(err, StoreError::Read { .. }), "{err:?}");
        assert_eq!(std::fs::read(dir.path().join("catalog")).unwrap(), before);
        assert_eq!(
            std::fs::read_dir(dir.path().join("pages")).unwrap().count(),
            0
        );
        assert!(store.entries().is_empty());
    }

    #[test]
    fn codec_texts() {
        let c = SealConfig {
            compression: Compression::Deflate(1),
            cipher: Cipher::Gcm,
        };
        assert_eq!(codec_text(&c, 256), "deflate-1+aes256-gcm");
        let c = SealConfig {
            compression: Compression::None,
            cipher: Cipher::Ctr,
        };
        assert_eq!(codec_text(&c, 128), "none+aes128-ctr");
    }
}
