//! Where a job's bytes come from: files, or standard input named `-`.
//!
//! [`Input::source`] is the one way engines read an input. A non-empty regular file is
//! memory-mapped: lanes read it in place, with no copy and no reader thread in the way, and a
//! file truncated while it is read is reported as an error ([`Mapping::check_unchanged`]).
//! Everything else (standard input, pipes, FIFOs, sockets, character devices, files that
//! report a length of 0 such as those under /proc, files that cannot be mapped) is a
//! [`Source::Stream`] read with read(2), which the lane runner overlaps with compute.
//!
//! A mapped file is read up to the length it had when it was opened; bytes appended later
//! are not part of the job. Setting `INPATH_MMAP=off` streams every file instead (for
//! filesystems where mapping is unwise, and to compare the two paths).

pub use crate::os::Mapping;
use crate::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One input named on a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Standard input (`-`).
    Stdin,
    /// A file path.
    File(PathBuf),
}

impl Input {
    /// `-` is standard input; anything else a path.
    pub fn from_arg(arg: &str) -> Input {
        if arg == "-" {
            Input::Stdin
        } else {
            Input::File(PathBuf::from(arg))
        }
    }

    /// The name to show in messages.
    pub fn path(&self) -> &Path {
        match self {
            Input::Stdin => Path::new("-"),
            Input::File(path) => path,
        }
    }

    /// Opens the input; returns a reader and, for regular files, the length in bytes.
    pub fn open(&self) -> Result<(Box<dyn Read + Send>, Option<u64>)> {
        match self {
            Input::Stdin => Ok((Box::new(std::io::stdin()), None)),
            Input::File(path) => {
                let (file, meta) = open_file(path)?;
                let len = meta.is_file().then_some(meta.len());
                Ok((Box::new(file), len))
            }
        }
    }
}

/// Reads a whole file of a bounded format (a saved sketch, a statistics file, a key file, a
/// manifest): more than `limit` bytes is [`Error::TooLarge`] naming the file, what it should be
/// and the limit, so a wrong path (an endless device, a huge unrelated file) never fills memory.
pub fn read_bounded(path: &Path, what: &str, limit: u64) -> Result<Vec<u8>> {
    let (file, meta) = open_file(path)?;
    let too_large = || Error::TooLarge {
        path: path.to_path_buf(),
        what: what.to_string(),
        limit,
    };
    if meta.is_file() && meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Opens a file for reading; a directory is an error that says so.
fn open_file(path: &Path) -> Result<(File, std::fs::Metadata)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return Err(Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a directory"),
        ));
    }
    Ok((file, meta))
}

/// An opened input, ready to be read.
pub enum Source {
    /// A regular file, mapped into memory.
    Mapped(Mapping),
    /// Bytes read in order with read(2).
    Stream {
        /// The reader.
        reader: Box<dyn Read + Send>,
        /// The length in bytes, when known in advance (a regular file that was not mapped).
        len: Option<u64>,
    },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Mapped(map) => map.fmt(f),
            Source::Stream { len, .. } => f.debug_struct("Stream").field("len", len).finish(),
        }
    }
}

impl Source {
    /// The length in bytes, when known in advance.
    pub fn len(&self) -> Option<u64> {
        match self {
            Source::Mapped(map) => Some(map.bytes().len() as u64),
            Source::Stream { len, .. } => *len,
        }
    }

    /// Whether the input is known to be empty.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Hands the input's bytes to `f` in order, in chunks of exactly `chunk_size` bytes except
    /// the last, which may be shorter (an empty input makes no call); returns the bytes read.
    ///
    /// A mapped file is handed over in place, then checked for truncation
    /// ([`Mapping::check_unchanged`]). A stream is read by a background thread into three
    /// reused buffers, so the next chunk is read while `f` works on this one. When `f` fails,
    /// its error is returned at once.
    pub fn for_each_chunk<E: From<Error>>(
        self,
        path: &Path,
        chunk_size: usize,
        mut f: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<u64, E> {
        let chunk_size = chunk_size.max(1);
        match self {
            Source::Mapped(map) => {
                let mut result = Ok(());
                for chunk in map.bytes().chunks(chunk_size) {
                    result = f(chunk);
                    if result.is_err() {
                        break;
                    }
                }
                // A truncated file was partly read as zeros: that is the error to report.
                map.check_unchanged()?;
                result.map(|()| map.bytes().len() as u64)
            }
            Source::Stream { reader, .. } => read_behind(reader, path, chunk_size, f),
        }
    }
}

/// Buffers in flight between a stream's reader thread and its consumer.
const STREAM_BUFFERS: usize = 3;

/// [`Source::for_each_chunk`] for a stream: a reader thread fills reused buffers while `f`
/// consumes the previous ones.
fn read_behind<E: From<Error>>(
    reader: Box<dyn Read + Send>,
    path: &Path,
    chunk_size: usize,
    mut f: impl FnMut(&[u8]) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    use std::sync::mpsc;
    let (full_tx, full_rx) = mpsc::sync_channel::<Result<(Vec<u8>, usize)>>(STREAM_BUFFERS);
    let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
    for _ in 0..STREAM_BUFFERS {
        let _ = free_tx.send(vec![0u8; chunk_size]);
    }
    let reader_path = path.to_path_buf();
    // Not a scoped thread: if `f` fails, this returns at once instead of waiting for a read
    // that may block for ever (a terminal, an idle pipe). The thread ends when it next finds
    // the channels closed.
    let mut reader = reader;
    std::thread::Builder::new()
        .name("inpath-reader".into())
        .spawn(move || {
            while let Ok(mut buf) = free_rx.recv() {
                match read_full(&mut *reader, &mut buf, &reader_path) {
                    Ok(0) => break,
                    Ok(n) => {
                        let at_end = n < buf.len();
                        if full_tx.send(Ok((buf, n))).is_err() || at_end {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = full_tx.send(Err(e));
                        break;
                    }
                }
            }
        })
        .map_err(|e| Error::io(path, e))?;
    let mut total = 0u64;
    for message in full_rx {
        let (buf, n) = message?;
        f(&buf[..n])?;
        total += n as u64;
        let _ = free_tx.send(buf);
    }
    Ok(total)
}

/// The environment variable that turns memory-mapping off (`off` or `0`).
pub const MMAP_ENV: &str = "INPATH_MMAP";

fn mapping_allowed() -> bool {
    !matches!(
        std::env::var(MMAP_ENV).as_deref(),
        Ok("off") | Ok("0") | Ok("no") | Ok("false")
    )
}

impl Input {
    /// Opens the input for a job: maps a non-empty regular file, streams anything else (see
    /// the module documentation for the rule). A directory is an error.
    pub fn source(&self) -> Result<Source> {
        match self {
            Input::Stdin => {
                let stdin = std::io::stdin();
                crate::os::widen_pipe(&stdin);
                Ok(Source::Stream {
                    reader: Box::new(stdin),
                    len: None,
                })
            }
            Input::File(path) => {
                let (file, meta) = open_file(path)?;
                if !meta.is_file() {
                    // A FIFO, socket or device (including /dev/stdin when it is a pipe).
                    crate::os::widen_pipe(&file);
                    return Ok(Source::Stream {
                        reader: Box::new(file),
                        len: None,
                    });
                }
                if meta.len() == 0 || !mapping_allowed() {
                    // Length 0 may still have content (/proc files): read it to its end.
                    let len = (meta.len() > 0).then_some(meta.len());
                    return Ok(Source::Stream {
                        reader: Box::new(file),
                        len,
                    });
                }
                let streamed = file.try_clone().map_err(|e| Error::io(path, e))?;
                match Mapping::map(file, path) {
                    Some(map) => Ok(Source::Mapped(map)),
                    None => Ok(Source::Stream {
                        reader: Box::new(streamed),
                        len: Some(meta.len()),
                    }),
                }
            }
        }
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read. Retries interrupted
/// reads, so a short count means end of input.
pub fn read_full(reader: &mut dyn Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(filled)
}
