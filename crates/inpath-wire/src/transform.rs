//! Transforms: the hook for engines that *change* the bytes in transit (the `seal` engine:
//! compress then encrypt in pages on one relay, decrypt then decompress on another, so two
//! unmodified endpoints talk over a protected link).
//!
//! # Seal and unseal
//! [`SealFactory`] makes transforms that seal every chunk read as it arrives (at most one page
//! per record, so an interactive protocol never waits for a page to fill); [`UnsealFactory`]
//! makes transforms that reassemble records from the byte stream (the 64-byte header gives
//! each record's length) and open them. `inpath wire relay --seal KEYFILE` on the near relay
//! and `--unseal KEYFILE` on the far one protect the link between them in both directions.
//!
//! # Calling rules
//! - [`Transform::push`] gets every byte read from one side, in order, in chunks of any size,
//!   and appends what should be written onward to `out` (possibly nothing yet: a page is
//!   still filling).
//! - [`Transform::finish`] is called once when that side closes cleanly (before the half-close
//!   is passed on) and appends the rest. It is not called when the connection is cut (reset,
//!   shutdown): the far side then sees a reset, never a short but valid-looking stream.
//! - An error from either ends the connection with outcome `transform_error` (for example a
//!   sealed record that fails authentication).
//! - Taps see the clear side: the input of a transform whose [`Transform::taps_see_output`] is
//!   false (seal), its output otherwise (unseal).
//! - Memory: `out` may hold one page more than the input chunk; transforms must not buffer
//!   unboundedly.

use std::sync::Arc;

/// Why a transform stopped a direction (reported as the connection's `transform_error`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransformError {
    /// The sealer could not be made (no randomness from the OS for its nonces).
    #[error("the sealer could not be initialised")]
    NoSealer,
    /// Sealing a page failed.
    #[error("{0}")]
    Seal(inpath_seal::Error),
    /// The sealed stream has a bad header or a record that fails authentication.
    #[error("sealed stream: {0}")]
    Stream(inpath_seal::Error),
    /// A record of a cipher the unsealer does not take: records without encryption or
    /// authentication can be forged without the key, so an unsealer made with
    /// [`UnsealFactory::only`] refuses every other cipher.
    #[error(
        "sealed stream: a record of cipher {found}, where only {expected} is taken (a record \
         that is not authenticated can be forged without the key)"
    )]
    Cipher {
        /// The record's cipher.
        found: String,
        /// The one cipher taken.
        expected: String,
    },
    /// A record's length does not fit this machine's address space.
    #[error("sealed record too large")]
    RecordTooLarge,
    /// The input ended inside a sealed record.
    #[error("the sealed stream ended inside a record ({pending} bytes of it arrived)")]
    Truncated {
        /// The bytes of the incomplete record that arrived.
        pending: usize,
    },
    /// A transform of the library's user failed.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A byte transform on one direction of a relayed connection.
pub trait Transform: Send {
    /// Transforms the next chunk; appends the output to `out`.
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TransformError>;
    /// The input ended cleanly: appends whatever is still held back.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TransformError>;
    /// Whether taps on this direction see the output (unsealing) rather than the input
    /// (sealing).
    fn taps_see_output(&self) -> bool;
}

/// Makes one [`Transform`] per connection.
pub trait TransformFactory: Send + Sync {
    /// A name for logs (`seal`, `unseal`).
    fn name(&self) -> &str;
    /// A fresh transform.
    fn make(&self) -> Box<dyn Transform>;
}

/// Shorthand for a shared factory.
pub type SharedTransform = Arc<dyn TransformFactory>;

/// Makes [`Transform`]s that seal chunks into records (the near end of a protected link).
pub struct SealFactory {
    config: inpath_seal::SealConfig,
    key_id: u32,
    key: inpath_seal::Key,
    page: usize,
}

impl SealFactory {
    /// Seals with `config` under `key` (id `key_id`), at most `page` bytes per record.
    pub fn new(
        config: inpath_seal::SealConfig,
        key_id: u32,
        key: inpath_seal::Key,
        page: usize,
    ) -> crate::Result<Self> {
        // Fail at start-up, not per connection, if the configuration or key is unusable.
        inpath_seal::Sealer::new(config, Some((key_id, &key)))
            .map_err(|e| crate::WireError::Transform(e.to_string()))?;
        if page == 0 {
            return Err(crate::WireError::Transform(
                "the seal page size must be at least 1 byte".into(),
            ));
        }
        Ok(SealFactory {
            config,
            key_id,
            key,
            page,
        })
    }
}

impl TransformFactory for SealFactory {
    fn name(&self) -> &str {
        "seal"
    }

    fn make(&self) -> Box<dyn Transform> {
        // A fresh sealer per connection: its own random nonce prefix.
        match inpath_seal::Sealer::new(self.config, Some((self.key_id, &self.key))) {
            Ok(sealer) => Box::new(SealTransform {
                sealer: Some(sealer),
                page: self.page,
            }),
            Err(e) => Box::new(SealTransform {
                sealer: None,
                page: e.to_string().len(),
            }),
        }
    }
}

struct SealTransform {
    /// `None` when the sealer could not be made (no OS randomness): every push then fails.
    sealer: Option<inpath_seal::Sealer>,
    page: usize,
}

impl Transform for SealTransform {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TransformError> {
        let sealer = self.sealer.as_mut().ok_or(TransformError::NoSealer)?;
        for page in input.chunks(self.page) {
            out.extend_from_slice(&sealer.seal(page).map_err(TransformError::Seal)?);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), TransformError> {
        Ok(())
    }

    fn taps_see_output(&self) -> bool {
        false
    }
}

/// Makes [`Transform`]s that open sealed records (the far end of a protected link).
pub struct UnsealFactory {
    unsealer: Arc<inpath_seal::Unsealer>,
    max_page: u64,
    only: Option<inpath_seal::Cipher>,
}

impl UnsealFactory {
    /// Opens records with the keys of `ring`, refusing records that claim more than `max_page`
    /// bytes (so a damaged length cannot make the relay buffer without bound).
    pub fn new(ring: &inpath_seal::KeyRing, max_page: u64) -> Self {
        UnsealFactory {
            unsealer: Arc::new(inpath_seal::Unsealer::new(ring).with_max_page(max_page)),
            max_page,
            only: None,
        }
    }

    /// Takes only records of `cipher` (the relay's own `--seal-cipher`): with aes256-gcm, the
    /// default, every record is authenticated, and a record claiming no encryption (which
    /// needs no key to forge) ends the connection.
    pub fn only(mut self, cipher: inpath_seal::Cipher) -> Self {
        self.only = Some(cipher);
        self
    }
}

impl TransformFactory for UnsealFactory {
    fn name(&self) -> &str {
        "unseal"
    }

    fn make(&self) -> Box<dyn Transform> {
        Box::new(UnsealTransform {
            unsealer: self.unsealer.clone(),
            max_page: self.max_page,
            only: self.only,
            pending: Vec::new(),
        })
    }
}

struct UnsealTransform {
    unsealer: Arc<inpath_seal::Unsealer>,
    max_page: u64,
    only: Option<inpath_seal::Cipher>,
    /// Bytes of records not yet complete.
    pending: Vec<u8>,
}

impl Transform for UnsealTransform {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TransformError> {
        self.pending.extend_from_slice(input);
        let mut at = 0;
        while self.pending.len() - at >= inpath_seal::page::HEADER_LEN {
            let header = inpath_seal::Header::parse(
                &self.pending[at..at + inpath_seal::page::HEADER_LEN],
                self.max_page,
            )
            .map_err(TransformError::Stream)?;
            if let Some(expected) = self.only {
                if header.cipher != expected {
                    return Err(TransformError::Cipher {
                        found: header.cipher.name().to_string(),
                        expected: expected.name().to_string(),
                    });
                }
            }
            let len =
                usize::try_from(header.record_len()).map_err(|_| TransformError::RecordTooLarge)?;
            if self.pending.len() - at < len {
                break;
            }
            let page = self
                .unsealer
                .unseal(&self.pending[at..at + len])
                .map_err(TransformError::Stream)?;
            out.extend_from_slice(&page);
            at += len;
        }
        self.pending.drain(..at);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), TransformError> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(TransformError::Truncated {
                pending: self.pending.len(),
            })
        }
    }

    fn taps_see_output(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};

    fn pair(cipher: Cipher) -> (Box<dyn Transform>, Box<dyn Transform>) {
        let key = Key::new(&[7u8; 32]).unwrap();
        let mut ring = KeyRing::new();
        ring.insert(3, key.clone());
        let config = SealConfig {
            compression: Compression::Lz4,
            cipher,
        };
        let seal = SealFactory::new(config, 3, key, 1000).unwrap();
        (seal.make(), UnsealFactory::new(&ring, 1 << 20).make())
    }

    #[test]
    fn records_split_anywhere_reassemble() {
        for cipher in [Cipher::Gcm, Cipher::Cbc, Cipher::Ctr] {
            let (mut seal, mut unseal) = pair(cipher);
            let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
            let mut sealed = Vec::new();
            for chunk in data.chunks(3333) {
                seal.push(chunk, &mut sealed).unwrap();
            }
            seal.finish(&mut sealed).unwrap();
            let mut clear = Vec::new();
            for byte in sealed.chunks(1) {
                unseal.push(byte, &mut clear).unwrap();
            }
            unseal.finish(&mut clear).unwrap();
            assert_eq!(clear, data);
            assert!(!seal.taps_see_output() && unseal.taps_see_output());
        }
    }

    #[test]
    fn damage_and_cut_streams_are_errors() {
        let (mut seal, mut unseal) = pair(Cipher::Gcm);
        let mut sealed = Vec::new();
        seal.push(&[1u8; 500], &mut sealed).unwrap();
        let mut damaged = sealed.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert!(unseal.push(&damaged, &mut Vec::new()).is_err());
        let (_, mut unseal) = pair(Cipher::Gcm);
        unseal
            .push(&sealed[..sealed.len() - 1], &mut Vec::new())
            .unwrap();
        assert!(matches!(
            unseal.finish(&mut Vec::new()),
            Err(TransformError::Truncated { .. })
        ));
        let (_, mut unseal) = pair(Cipher::Gcm);
        assert!(unseal.push(&[0u8; 64], &mut Vec::new()).is_err());
    }

    #[test]
    fn an_unsealer_for_one_cipher_refuses_forged_plain_records() {
        // A record without encryption needs no key: anyone could send one.
        let config = SealConfig {
            compression: Compression::None,
            cipher: Cipher::None,
        };
        let forged = SealFactory::new(config, 0, Key::new(&[0u8; 32]).unwrap(), 1000).unwrap();
        let mut sealed = Vec::new();
        let mut forger = forged.make();
        forger.push(b"DROP TABLE", &mut sealed).unwrap();
        let mut ring = KeyRing::new();
        ring.insert(3, Key::new(&[7u8; 32]).unwrap());
        let mut open = UnsealFactory::new(&ring, 1 << 20).make();
        let mut clear = Vec::new();
        open.push(&sealed, &mut clear).unwrap();
        assert_eq!(clear, b"DROP TABLE", "without only(), any cipher is opened");
        let mut strict = UnsealFactory::new(&ring, 1 << 20).only(Cipher::Gcm).make();
        let e = strict.push(&sealed, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("cipher none"), "{e}");
        let (mut seal, _) = pair(Cipher::Gcm);
        let mut good = Vec::new();
        seal.push(b"ok", &mut good).unwrap();
        let mut strict = UnsealFactory::new(&ring, 1 << 20).only(Cipher::Gcm).make();
        let mut clear = Vec::new();
        strict.push(&good, &mut clear).unwrap();
        assert_eq!(clear, b"ok");
    }
}
