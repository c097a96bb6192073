//! The errors of the seal engine. Each variant names what is wrong and carries the values a
//! caller needs to act on it; tests match on the variant, never on the message.

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while sealing, unsealing, compressing, decompressing or ciphering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is outside its valid range.
    #[error("{name} = {value} is out of range: {valid}")]
    Parameter {
        /// The parameter's name as the user knows it.
        name: String,
        /// The value that was given.
        value: String,
        /// The valid range or set of values, in words.
        valid: String,
    },

    /// The input ends before a structure it started is complete.
    #[error("{what} is truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// What was being read (`seal record header`, `gzip stream`...).
        what: &'static str,
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes there were.
        available: u64,
    },

    /// The bytes do not start with the magic number of the format.
    #[error("not a {what}: magic is {found}, expected {expected}")]
    BadMagic {
        /// The format expected.
        what: &'static str,
        /// The bytes found, in hex.
        found: String,
        /// The magic expected, in hex.
        expected: String,
    },

    /// A seal record of a format version this build does not read.
    #[error(
        "seal record version {version} is not supported (this build reads versions {supported})"
    )]
    UnsupportedVersion {
        /// The version in the header.
        version: u8,
        /// The versions this build reads.
        supported: &'static str,
    },

    /// The header's own checksum does not match: the header is damaged.
    #[error(
        "seal record header is damaged: header CRC-32C is {stored:08x}, computed {computed:08x}"
    )]
    HeaderChecksum {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the header bytes as read.
        computed: u32,
    },

    /// A header field holds a value that is not valid (an unknown algorithm code, sizes that
    /// contradict each other).
    #[error("seal record header field {field} is not valid: {detail}")]
    BadHeader {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// A size claimed by the input exceeds what the reader accepts; nothing was allocated for it.
    #[error("{what} claims {claimed} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// What claims the size.
        what: &'static str,
        /// The size claimed.
        claimed: u64,
        /// The limit in force.
        limit: u64,
    },

    /// The record names a key id the key ring does not hold.
    #[error("no key with id {id} (the key ring holds {available})")]
    UnknownKeyId {
        /// The key id in the record.
        id: u32,
        /// The ids the key ring holds, in words.
        available: String,
    },

    /// A key has the wrong length for what it is used for.
    #[error("key {id} is {found} bytes long but {expected} needs {needed} bytes")]
    KeySize {
        /// The key id.
        id: u32,
        /// The key's length in bytes.
        found: usize,
        /// What needs the key (`aes256-ctr`...).
        expected: String,
        /// The length it needs.
        needed: usize,
    },

    /// The stored payload does not match its checksum: the record was damaged after sealing.
    #[error(
        "seal record payload is damaged: payload CRC-32C is {stored:08x}, computed {computed:08x}"
    )]
    PayloadChecksum {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the payload as read.
        computed: u32,
    },

    /// The payload is intact but does not decrypt to the page that was sealed: the key with
    /// this id is not the key that sealed the record.
    #[error("wrong key: key {key_id} does not open this record ({detail})")]
    WrongKey {
        /// The key id used.
        key_id: u32,
        /// How it showed (page checksum mismatch, bad padding, undecodable payload).
        detail: String,
    },

    /// AES-GCM authentication failed: the key is wrong or the record was modified (an attacker
    /// can fix the unkeyed CRCs, so this is the verdict that counts in the GCM tier).
    #[error("authentication failed: the record was modified or key {key_id} is not its key")]
    AuthenticationFailed {
        /// The key id used.
        key_id: u32,
    },

    /// A compressed stream or a cipher input is not valid.
    #[error("{format} input is not valid: {detail}")]
    Corrupt {
        /// The format (`gzip`, `lz4 frame`, `aes-cbc`...).
        format: &'static str,
        /// What is wrong, with the offset where known.
        detail: String,
    },

    /// A checksum inside a compressed stream does not match (gzip CRC-32, zlib Adler-32, LZ4
    /// xxHash32, Snappy CRC-32C, Zstd XXH64).
    #[error("{format} checksum mismatch in {what}: stored {stored:08x}, computed {computed:08x}")]
    StreamChecksum {
        /// The format.
        format: &'static str,
        /// Which checksum (`member trailer`, `block`, `content`, `chunk`...).
        what: &'static str,
        /// The checksum in the stream.
        stored: u32,
        /// The checksum of the data.
        computed: u32,
    },

    /// A stream has bytes after its end where the format allows none.
    #[error("{format} stream has {bytes} unexpected byte(s) after its end")]
    TrailingData {
        /// The format.
        format: &'static str,
        /// How many bytes follow (at least).
        bytes: u64,
    },

    /// ECB or CBC input whose length is not a whole number of 16-byte blocks, without padding.
    #[error(
        "{mode} needs whole 16-byte blocks: {len} bytes leave {rest} over (use PKCS#7 padding)"
    )]
    PartialBlock {
        /// The mode.
        mode: &'static str,
        /// The input length.
        len: u64,
        /// Bytes after the last whole block.
        rest: usize,
    },

    /// PKCS#7 padding is not valid after decryption (wrong key, wrong IV, or damaged input).
    #[error("{mode}: PKCS#7 padding is not valid (wrong key or IV, or damaged input)")]
    BadPadding {
        /// The mode.
        mode: &'static str,
    },

    /// An operation is not valid in the current state.
    #[error("{0}")]
    State(String),

    /// The library under a codec failed for a reason that is not the input's fault.
    #[error("{what}: {detail}")]
    Internal {
        /// The operation.
        what: &'static str,
        /// The library's message.
        detail: String,
    },
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
    pub fn corrupt(format: &'static str, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            format,
            detail: detail.into(),
        }
    }

    /// Whether this error means the input is damaged or was not made by the format's writer
    /// (as opposed to a bad parameter, a wrong or missing key, or a state error).
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            Error::Truncated { .. }
                | Error::BadMagic { .. }
                | Error::UnsupportedVersion { .. }
                | Error::HeaderChecksum { .. }
                | Error::BadHeader { .. }
                | Error::TooLarge { .. }
                | Error::PayloadChecksum { .. }
                | Error::Corrupt { .. }
                | Error::StreamChecksum { .. }
                | Error::TrailingData { .. }
                | Error::PartialBlock { .. }
                | Error::BadPadding { .. }
        )
    }
}

impl From<Error> for inpath_core::Error {
    fn from(err: Error) -> Self {
        match err {
            Error::Parameter { name, value, valid } => {
                inpath_core::Error::Parameter { name, value, valid }
            }
            Error::State(text) => inpath_core::Error::State(text),
            other => inpath_core::Error::Corrupt {
                what: "seal input".into(),
                detail: other.to_string(),
            },
        }
    }
}
