//! The errors of the query storage format. Every variant that concerns stored data names the
//! table and, where it applies, the column and the page; tests match on the variant.

use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while writing or reading a column table.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The manifest file is missing or cannot be read.
    #[error("table {table}: cannot read the manifest {path}: {source}")]
    ManifestMissing {
        /// The table (the directory's name when the manifest is unreadable).
        table: String,
        /// The manifest's path.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// The manifest does not start with the manifest magic number.
    #[error(
        "table {table}: {path} is not a table manifest: magic is {found}, expected {expected}"
    )]
    BadMagic {
        /// The table.
        table: String,
        /// The file.
        path: PathBuf,
        /// The bytes found, in hex.
        found: String,
        /// The magic expected, in hex.
        expected: String,
    },

    /// A manifest or column file of a format version this build does not read.
    #[error("table {table}: {what} has format version {version}; this build reads {supported}")]
    UnsupportedVersion {
        /// The table.
        table: String,
        /// Which file (`manifest`, `column l_tax file 3.col`).
        what: String,
        /// The version found.
        version: u16,
        /// The versions this build reads.
        supported: &'static str,
    },

    /// The manifest is damaged or inconsistent (lengths, offsets, counts, JSON).
    #[error("table {table}: the manifest is damaged: {detail}")]
    ManifestDamaged {
        /// The table.
        table: String,
        /// What is wrong.
        detail: String,
    },

    /// The manifest's seal record does not open: damaged, truncated, sealed with another key,
    /// or sealed while no key was given.
    #[error("table {table}: the manifest does not unseal: {source}")]
    ManifestSeal {
        /// The table.
        table: String,
        /// The seal engine's verdict (`WrongKey`, `AuthenticationFailed`, `PayloadChecksum`...).
        source: inpath_seal::Error,
    },

    /// A column file is not the length the manifest records (truncated, extended, replaced).
    #[error(
        "table {table}, column {column}: file {path} is {found} bytes, the manifest says {expected}"
    )]
    ColumnFileLength {
        /// The table.
        table: String,
        /// The column's name.
        column: String,
        /// The file.
        path: PathBuf,
        /// Bytes the manifest records.
        expected: u64,
        /// Bytes on disk.
        found: u64,
    },

    /// A column file's header is not valid.
    #[error("table {table}, column {column}: file {path} is not valid: {detail}")]
    ColumnFileDamaged {
        /// The table.
        table: String,
        /// The column's name.
        column: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// A page's seal record does not open (damaged or truncated record, wrong key, failed
    /// authentication).
    #[error("table {table}, column {column}, page {page}: {source}")]
    PageSeal {
        /// The table.
        table: String,
        /// The column's name.
        column: String,
        /// The page number.
        page: usize,
        /// The seal engine's verdict (boxed: it is the largest part of this error).
        source: Box<inpath_seal::Error>,
    },

    /// A page unsealed but its contents are not a valid page of its column.
    #[error("table {table}, column {column}, page {page}: the page is not valid: {detail}")]
    PageDamaged {
        /// The table.
        table: String,
        /// The column's name.
        column: String,
        /// The page number.
        page: usize,
        /// What is wrong.
        detail: String,
    },

    /// A CSV value that does not fit its column's type (a float that overflows to infinity).
    #[error("table {table}: CSV data row {row}, column {column}: {problem}")]
    BadValue {
        /// The table.
        table: String,
        /// The 1-based data row (the header is not counted).
        row: u64,
        /// The column's name.
        column: String,
        /// What is wrong, with the valid range.
        problem: String,
    },

    /// An Arrow type the format does not store.
    #[error("table {table}, column {column}: Arrow type {data_type} is not supported (Int32, Int64, Date32, Decimal128, Float64, Utf8/LargeUtf8/Utf8View, Boolean are)")]
    UnsupportedType {
        /// The table.
        table: String,
        /// The column's name.
        column: String,
        /// The type, as Arrow prints it.
        data_type: String,
    },

    /// A record batch does not match the table's schema.
    #[error("table {table}: the batch does not match the table's schema: {detail}")]
    SchemaMismatch {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },

    /// The output directory exists and is not empty (and overwriting was not asked for, or it
    /// is not a table directory that may be replaced).
    #[error("{path} exists and is not empty: {detail}")]
    OutputExists {
        /// The directory.
        path: PathBuf,
        /// Why it was refused.
        detail: String,
    },

    /// An argument is out of range (a column or page number, rows per page, a bound's type).
    #[error("{name} = {value} is out of range: {valid}")]
    Parameter {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
        /// What is valid.
        valid: String,
    },

    /// Setting up sealing failed (a key of the wrong size for the tier, no key for a cipher).
    #[error("table {table}: {source}")]
    Seal {
        /// The table.
        table: String,
        /// The seal engine's error.
        source: inpath_seal::Error,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// Writing an output through `inpath_core::output` failed.
    #[error(transparent)]
    Output(#[from] inpath_core::Error),

    /// The TPC-H generator or Arrow failed.
    #[error("table {table}: {detail}")]
    Arrow {
        /// The table.
        table: String,
        /// Arrow's message.
        detail: String,
    },

    /// A SQL statement failed to plan or run (DataFusion's message, which names the missing
    /// table or column; errors from our pages keep their table, column and page).
    #[error("{detail}")]
    Sql {
        /// What went wrong.
        detail: String,
    },

    /// The offload device refused or failed a Table Task graph: a graph from a newer version,
    /// a damaged graph, a memory budget too small for one page, a value out of range, a
    /// cancelled query.
    #[error("offload device: {detail}")]
    Offload {
        /// What went wrong.
        detail: String,
    },

    /// The offload device declined a graph before sending anything (a join's build rows
    /// outgrow its memory, or join keys beyond what it packs): the plan runs that part on
    /// the host instead.
    #[error("offload device: declined: {detail}")]
    DeviceDeclined {
        /// Why.
        detail: String,
        /// Whether rows held for joins or groups outgrew the device's memory (a graph the
        /// device can run in key-range passes instead), rather than something no pass
        /// changes (a page larger than a lane's share, a key beyond 32 bits).
        memory: bool,
    },

    /// Writing a table was stopped (an interrupt): the partly written table was removed;
    /// tables finished before it stay.
    #[error(
        "interrupted while writing table {table}: it was removed, tables finished before it stay"
    )]
    Interrupted {
        /// The table being written.
        table: String,
    },

    /// A directory holds no column tables.
    #[error("{path}: no column tables here (a table is a directory holding a `manifest`)")]
    NoTables {
        /// The directory.
        path: PathBuf,
    },
}

impl Error {
    /// [`Error::Parameter`]: `name = value` is outside `valid`.
    pub fn parameter(
        name: impl Into<String>,
        value: impl std::fmt::Display,
        valid: impl Into<String>,
    ) -> Error {
        Error::Parameter {
            name: name.into(),
            value: value.to_string(),
            valid: valid.into(),
        }
    }

    /// [`Error::Io`] on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// What is wrong inside a page, a packed block or a dictionary, in words; the reader adds where
/// (table, column, page) in [`Error::PageDamaged`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// A [`Malformed`] from a format string.
macro_rules! malformed {
    ($($arg:tt)*) => {
        $crate::error::Malformed(format!($($arg)*))
    };
}
pub(crate) use malformed;
