//! Typed errors shared by every engine. Each variant carries the offending value and, where there
//! is one, the valid range, so a front end can print a message that says what to change.

use std::path::PathBuf;

/// Result alias used across inpath crates.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while configuring, feeding or finishing an engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is outside its valid range.
    #[error("{name} = {value} is out of range: {valid}")]
    Parameter {
        /// The parameter's name as the user knows it (for example `hll_p`).
        name: String,
        /// The value that was given.
        value: String,
        /// The valid range or set of values, in words.
        valid: String,
    },

    /// A job ended in the middle of a fixed-width record.
    #[error(
        "input ends with {trailing} byte(s) that do not make a whole {width}-byte item \
         ({complete} whole items were read before them); the input length must be a multiple of {width}"
    )]
    TrailingBytes {
        /// Bytes left over after the last whole item.
        trailing: usize,
        /// The record width.
        width: usize,
        /// Whole records seen before the leftover bytes.
        complete: u64,
    },

    /// A file or stream could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file (or `-` for standard input).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// An output names the same file as one of the inputs (writing it would destroy the input).
    #[error(
        "refusing to write {}: it is the same file as the input {} (writing would destroy the \
         input); choose another output path",
        output.display(),
        input.display()
    )]
    SameFile {
        /// The output as named.
        output: PathBuf,
        /// The input it matches, as named.
        input: PathBuf,
    },

    /// A text line or CSV field is longer than the bound every reader holds to
    /// ([`crate::framing::MAX_RECORD`]): the input is not text of that kind (an endless device,
    /// a binary file) or needs another format.
    #[error(
        "{what} is longer than {} MiB, the longest inpath reads; is the input text \
         of this kind (not an endless device or a binary file)?",
        limit >> 20
    )]
    RecordTooLong {
        /// Which record, in words: "line 7 (after 6 whole lines)".
        what: String,
        /// The bound in bytes.
        limit: usize,
    },

    /// A file of a bounded format is longer than that format can be.
    #[error(
        "{} is larger than {} MiB, the most {what} can be; is it the right file?",
        path.display(),
        limit >> 20
    )]
    TooLarge {
        /// The file as named.
        path: PathBuf,
        /// What it should hold ("a saved sketch", "a key file").
        what: String,
        /// The bound in bytes.
        limit: u64,
    },

    /// A CSV column named by the user does not exist.
    #[error("CSV column {column} not found; the header has {available}")]
    MissingColumn {
        /// The column as the user named it.
        column: String,
        /// What the header or first row offers.
        available: String,
    },

    /// A CSV row does not have the fields the selection needs.
    #[error("CSV row {row} has {fields} field(s) but {needed} are needed")]
    RaggedRow {
        /// 1-based row number in the file, the header counted.
        row: u64,
        /// Fields found on that row.
        fields: usize,
        /// Fields the selection needs.
        needed: usize,
    },

    /// A value could not be parsed as the type the engine needs.
    #[error("{what} at {location}: {value:?} is not {expected}")]
    BadValue {
        /// What was being parsed (for example `CSV cell`).
        what: String,
        /// Where it was found (row and column, offset...).
        location: String,
        /// The text found, shortened.
        value: String,
        /// What was expected.
        expected: String,
    },

    /// A serialized state (a sketch file, statistics file...) is damaged or not what it claims.
    #[error("{what} is not valid: {detail}")]
    Corrupt {
        /// What was being read (for example `sketch file a.skt`).
        what: String,
        /// What is wrong with it.
        detail: String,
    },

    /// Two states cannot be merged because they were configured differently.
    #[error("cannot merge: {0}")]
    Incompatible(String),

    /// An operation is not valid in the engine's current state.
    #[error("{0}")]
    State(String),
}

impl Error {
    /// Shorthand for [`Error::Parameter`].
    pub fn parameter(
        name: impl Into<String>,
        value: impl ToString,
        valid: impl Into<String>,
    ) -> Self {
        Error::Parameter {
            name: name.into(),
            value: value.to_string(),
            valid: valid.into(),
        }
    }

    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            detail: detail.into(),
        }
    }

    /// Shorthand for [`Error::Io`].
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Shortens user data for an error message: at most 40 characters, lossily decoded.
pub fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > 40 {
        let mut short: String = text.chars().take(40).collect();
        short.push('…');
        short
    } else {
        text.into_owned()
    }
}
