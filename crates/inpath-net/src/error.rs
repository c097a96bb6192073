//! The typed error of `inpath-net`: each variant names the file, the address or the value and,
//! where there is one, the valid range; the cause is kept as the source.

use std::path::PathBuf;

/// `Result` with [`NetError`].
pub type Result<T, E = NetError> = std::result::Result<T, E>;

/// What went wrong while setting up TLS, authentication or a listener.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// A file could not be read (missing, a directory, too large, no permission).
    #[error("cannot read {what} {}", path.display())]
    Read {
        /// What the file was for (`TLS certificate`, `token file`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<inpath_core::Error>,
    },
    /// A PEM file holds nothing usable for its purpose.
    #[error("{what} {}: {detail}", path.display())]
    Pem {
        /// What the file was for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was expected and found.
        detail: String,
    },
    /// rustls refused a configuration (a key that does not match its certificate, a CA
    /// file with no usable certificate, ...).
    #[error("{what}: {source}")]
    Tls {
        /// What was being set up.
        what: String,
        /// rustls' reason.
        #[source]
        source: rustls::Error,
    },
    /// A line of a token or password file does not parse.
    #[error("{what} {}, line {line}: {detail}", path.display())]
    Entry {
        /// `token file`, `password file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The line (from 1).
        line: usize,
        /// What is wrong and what is expected.
        detail: String,
    },
    /// A secret file whose mode lets others read or change it.
    #[error("{what} {} has mode {mode:04o}: {detail}", path.display())]
    Mode {
        /// What the file holds.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Why that is refused and how to fix it.
        detail: String,
    },
    /// A setting outside its valid range.
    #[error("{name} {value:?} is not valid: {valid}")]
    Setting {
        /// The option.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is valid.
        valid: String,
    },
    /// The listener policy refused an address (no open non-loopback port without TLS and
    /// authentication, unless the user says so).
    #[error("refusing to listen on {addr}: {detail}")]
    Policy {
        /// The address as given.
        addr: String,
        /// Why, and the ways out.
        detail: String,
    },
    /// An address that does not parse or resolve.
    #[error("address {addr:?}: {detail}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why.
        detail: String,
    },
    /// Making a certificate failed.
    #[error("cannot make the {what}: {source}")]
    Cert {
        /// Which certificate.
        what: &'static str,
        /// rcgen's reason.
        #[source]
        source: rcgen::Error,
    },
    /// A file that would be replaced, and replacing was not asked for.
    #[error("refusing to replace {}: it exists (give --force to replace the files)", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A file could not be written (through `inpath_core::output`: all or nothing).
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<inpath_core::Error>,
    },
    /// A socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
}
