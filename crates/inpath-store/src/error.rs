//! The errors of the store engine. Each variant names what is wrong and carries the values a
//! caller needs to act on it; tests match on the variant, and the CLI prints the message.

use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What can go wrong in the page store, its reader and its kernels.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No handle with this id is in the catalog (never created, or removed).
    #[error("unknown handle {handle} in store {dir} (`inpath store ls` lists the handles)")]
    UnknownHandle {
        /// The handle id asked for.
        handle: u64,
        /// The store directory.
        dir: PathBuf,
    },

    /// The handle exists but holds a newer generation than the one asked for: the file was
    /// replaced since the caller learned the handle.
    #[error(
        "stale handle {handle}@{asked}: the store holds generation {current} of it (the file was \
         replaced; read {handle}@{current} or {handle})"
    )]
    StaleHandle {
        /// The handle id.
        handle: u64,
        /// The generation asked for.
        asked: u64,
        /// The generation the catalog holds.
        current: u64,
    },

    /// No handle was put under this name (and it is not written as `ID` or `ID@GENERATION`).
    #[error("store {dir} holds no file named {name:?} (`inpath store ls` lists the names; a handle is ID, ID@GENERATION or a name)")]
    UnknownName {
        /// The name asked for.
        name: String,
        /// The store directory.
        dir: PathBuf,
    },

    /// A handle was not written as `ID` or `ID@GENERATION`.
    #[error("{text:?} is not a handle: expected ID or ID@GENERATION (decimal numbers)")]
    BadHandle {
        /// The text given.
        text: String,
    },

    /// A byte range reaches past the end of the handle's file.
    #[error(
        "range {offset}..{end} of handle {handle} is past the end of the file ({size} bytes)",
        end = *offset as u128 + *length as u128
    )]
    RangePastEnd {
        /// The handle id.
        handle: u64,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        length: u64,
        /// Size of the file.
        size: u64,
    },

    /// The catalog file is not a valid catalog (damaged, truncated, or another file).
    #[error("the catalog {path} is damaged: {detail}")]
    CatalogDamaged {
        /// The catalog file.
        path: PathBuf,
        /// What is wrong, in words.
        detail: String,
    },

    /// The catalog was written by a newer format version than this build reads.
    #[error(
        "the catalog {path} has format version {version}; this build reads versions 1 to {newest}"
    )]
    CatalogVersion {
        /// The catalog file.
        path: PathBuf,
        /// The version in the file.
        version: u16,
        /// The newest version this build reads.
        newest: u16,
    },

    /// The directory holds no catalog: it is not a store.
    #[error("{dir} is not an inpath store (no catalog file; `inpath store put` creates one)")]
    NotAStore {
        /// The directory.
        dir: PathBuf,
    },

    /// A stored page does not match its extent (short data file, wrong length).
    #[error("page {page} of handle {handle} is damaged: {detail}")]
    PageDamaged {
        /// The handle id.
        handle: u64,
        /// The logical page number.
        page: u64,
        /// What is wrong.
        detail: String,
    },

    /// A sealed page did not unseal: damaged, or sealed with another key.
    #[error("page {page} of handle {handle} does not unseal")]
    Unseal {
        /// The handle id.
        handle: u64,
        /// The logical page number.
        page: u64,
        /// The seal error (tells damage, wrong key and unknown key id apart).
        #[source]
        source: inpath_seal::Error,
    },

    /// A sealed handle was read without any key, or sealing was asked without one.
    #[error("handle {handle} is sealed ({codec}); a key file is needed to read it")]
    KeyNeeded {
        /// The handle id.
        handle: u64,
        /// The handle's codec.
        codec: String,
    },

    /// Sealing a page failed (the key does not fit the tier, ...).
    #[error("cannot seal page {page}")]
    Seal {
        /// The page number.
        page: u64,
        /// The seal error.
        #[source]
        source: inpath_seal::Error,
    },

    /// A parameter is out of range.
    #[error("{name} = {value} is out of range: {valid}")]
    Parameter {
        /// The parameter's name as the user knows it.
        name: &'static str,
        /// The value given.
        value: String,
        /// The valid values, in words.
        valid: String,
    },

    /// Reading a file of the store (or the input of a put) failed.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Writing a file of the store failed (a full disk, say); the store is unchanged.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// Writing through `inpath_core::output` failed.
    #[error(transparent)]
    Output(#[from] inpath_core::Error),

    /// A handle does not hold a file of the format a kernel reads (wrong magic, too short).
    #[error("handle {handle} does not hold a {format}: {detail}")]
    NotFormat {
        /// The handle id.
        handle: u64,
        /// The format expected ("CSR graph", "chase file").
        format: &'static str,
        /// What was found instead.
        detail: String,
    },

    /// A file of a versioned format was written by a newer format version than this build reads.
    #[error(
        "handle {handle} holds a {format} of format version {version}; this build reads versions \
         1 to {newest}"
    )]
    FormatVersion {
        /// The handle id.
        handle: u64,
        /// The format ("CSR graph", "chase file").
        format: &'static str,
        /// The version in the file.
        version: u16,
        /// The newest version this build reads.
        newest: u16,
    },

    /// A page of a structured file (a CSR graph, a chase file) fails its checks: a checksum, a
    /// field out of range, a value inconsistent with the rest of the file.
    #[error("the {format} in handle {handle} is corrupt at page {page}: {detail}")]
    Corrupt {
        /// The handle id.
        handle: u64,
        /// The format ("CSR graph", "chase file").
        format: &'static str,
        /// The logical page holding the bad bytes.
        page: u64,
        /// What is wrong.
        detail: String,
    },

    /// A file laid out page by page was put into the store with another page size.
    #[error(
        "the {format} in handle {handle} is laid out for {written}-byte pages but is stored in \
         {stored}-byte pages (put it again with --page-size {written})"
    )]
    PageSizeMismatch {
        /// The handle id.
        handle: u64,
        /// The format ("CSR graph", "chase file").
        format: &'static str,
        /// The page size the file was written for.
        written: u64,
        /// The handle's page size.
        stored: u64,
    },

    /// A line of an edge list is not an edge.
    #[error("{path} line {line}: {detail}")]
    EdgeList {
        /// The edge list (as the caller named it).
        path: PathBuf,
        /// The line number, from 1.
        line: u64,
        /// What is wrong.
        detail: String,
    },

    /// An LSH index file (`DIR/index/ID.lsh`) is missing, damaged, of another version, or
    /// stale (built for another generation or item size of its handle); `detail` names the
    /// fix.
    #[error("LSH index {path}: {detail}")]
    LshIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong, and what to do.
        detail: String,
    },

    /// A request to a store server is not one it serves (not JSON, an unknown op, another
    /// protocol version, bad hexadecimal).
    #[error("bad request: {detail}")]
    BadRequest {
        /// What is wrong.
        detail: String,
    },

    /// A store server answered with an error, or broke the protocol.
    #[error("store server {addr}: {detail}")]
    Remote {
        /// The server's address.
        addr: String,
        /// Its message, or what went wrong.
        detail: String,
    },

    /// Connecting to, listening on or writing to a peer failed.
    #[error("{addr}: {what}")]
    Connection {
        /// The address (or the output) involved.
        addr: String,
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// An in-store tap failed: a bad option, or input it cannot take.
    #[error("tap {spec}: {source}")]
    Tap {
        /// The tap's specification.
        spec: String,
        /// What went wrong.
        #[source]
        source: Box<inpath_taps::TapError>,
    },

    /// A store server refused a connection: it serves its limit already.
    #[error("the server is at its limit of {max_conns} connections")]
    Busy {
        /// The limit (`--max-conns`).
        max_conns: usize,
    },

    /// A store server refused a connection or a request: no credential, a wrong one, a role
    /// that may not do it, a plain client on a TLS port. Nothing was changed.
    #[error("refused: {detail}")]
    Refused {
        /// Why, and what would be accepted.
        detail: String,
    },

    /// TLS or authentication could not be set up (a certificate, key or token file).
    #[error(transparent)]
    Security(#[from] Box<inpath_net::NetError>),

    /// Not one read worker thread could be started (the system allows no more threads).
    #[error("cannot start a read worker thread: {detail}")]
    ReadWorkers {
        /// The system's reason.
        detail: String,
    },

    /// The reader was shut down while a request was in flight.
    #[error("the reader stopped before request {tag} completed")]
    ReaderStopped {
        /// The tag of the request's page that never completed.
        tag: u64,
    },
}

impl StoreError {
    pub(crate) fn parameter(name: &'static str, value: impl ToString, valid: &str) -> StoreError {
        StoreError::Parameter {
            name,
            value: value.to_string(),
            valid: valid.to_string(),
        }
    }
}
