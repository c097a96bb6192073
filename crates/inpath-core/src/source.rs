//! Where a job's bytes come from: files, or standard input named `-`.

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
