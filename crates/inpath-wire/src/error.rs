//! Typed errors of the wire placement. Each carries the offending value so the CLI can say what
//! to change. Faults of individual connections (a reset, a refused destination) are *not*
//! errors of the server: they are reported per connection (see [`crate::hub`]) and the server
//! keeps serving.

/// What can go wrong while configuring or starting a relay or sink.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// An address could not be parsed or resolved.
    #[error("bad address {addr:?}: {detail}")]
    Address {
        /// The address as given.
        addr: String,
        /// Why it is not usable.
        detail: String,
    },

    /// A listening socket could not be opened (port in use, no permission...).
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Which listener (`connections` or `http`).
        what: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A `--tap` specification cannot be run, or two tap results cannot be merged.
    #[error(transparent)]
    Tap(#[from] inpath_taps::TapError),

    /// A server setting is out of range.
    #[error("{name} = {value} is out of range: {valid}")]
    Setting {
        /// The setting's name (for example `buffer`).
        name: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        valid: String,
    },

    /// An engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] inpath_core::Error),

    /// The results log could not be written.
    #[error("cannot write the results log: {0}")]
    Log(#[source] std::io::Error),

    /// A seal/unseal transform could not be set up.
    #[error("seal/unseal transform: {0}")]
    Transform(String),
}

/// Result alias for the wire crate.
pub type Result<T, E = WireError> = std::result::Result<T, E>;
