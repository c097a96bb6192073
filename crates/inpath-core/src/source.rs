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
                let file = File::open(path).map_err(|e| Error::io(path, e))?;
                let meta = file.metadata().map_err(|e| Error::io(path, e))?;
                if meta.is_dir() {
                    return Err(Error::io(
                        path,
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a directory"),
                    ));
                }
                let len = meta.is_file().then_some(meta.len());
                Ok((Box::new(file), len))
            }
        }
    }
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
                let file = File::open(path).map_err(|e| Error::io(path, e))?;
                let meta = file.metadata().map_err(|e| Error::io(path, e))?;
                if meta.is_dir() {
                    return Err(Error::io(
                        path,
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a directory"),
                    ));
                }
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
