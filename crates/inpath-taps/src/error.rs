//! The taps' error: a specification that cannot be run, an engine that refused its input, or
//! two results that cannot be merged. Each names the specification or the values involved.

/// What can go wrong when a tap is configured, run over an input or merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TapError {
    /// A specification names an unknown tap.
    #[error("unknown tap {name:?} in {spec:?}; available taps: {available}")]
    UnknownTap {
        /// The tap name given.
        name: String,
        /// The whole specification.
        spec: String,
        /// The taps that exist.
        available: String,
    },

    /// An option is unknown or has a bad value.
    #[error("tap {spec:?}: {detail}")]
    Option {
        /// The whole specification.
        spec: String,
        /// What is wrong, and what is allowed.
        detail: String,
    },

    /// The engine refused the input of a whole-input run ([`crate::TapFactory::run_input`]): a
    /// bad record, an unreadable input.
    #[error("tap {spec:?}: {source}")]
    Input {
        /// The specification, every option spelled out.
        spec: String,
        /// What the engine said.
        #[source]
        source: inpath_core::Error,
    },

    /// The engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] inpath_core::Error),

    /// Two partial results could not be merged.
    #[error("cannot merge {what}: {detail}")]
    Merge {
        /// What was being merged.
        what: String,
        /// Why not.
        detail: String,
    },
}

/// Result alias for the taps.
pub type Result<T, E = TapError> = std::result::Result<T, E>;

/// A [`TapError::Option`] for the specification `spec`.
pub(crate) fn option_error(spec: &str, detail: impl Into<String>) -> TapError {
    TapError::Option {
        spec: spec.to_string(),
        detail: detail.into(),
    }
}

/// A [`TapError::Merge`]: the other result is not `what`.
pub(crate) fn not_mergeable(what: &str, other: &str) -> TapError {
    TapError::Merge {
        what: what.into(),
        detail: format!("the other result is not {other}"),
    }
}
