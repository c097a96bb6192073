//! # inpath-seal
//!
//! Compute on data while it moves to storage: the **page codec** of the SAP HANA security
//! engine (compress, then encrypt each page on the write path; decrypt, then decompress on the
//! read path) and the **streaming codec and cipher library** of the Vitis security and data
//! compression libraries.
//!
//! - [`page`]: `seal(page) -> record`, `unseal(record) -> page`, in tiers from plain storage to
//!   AES-256-GCM; a fixed 64-byte versioned header; damage and wrong keys told apart; batches
//!   across threads, byte-identical to page-by-page sealing.
//! - [`codec`]: push/pop compressors and decompressors for gzip, zlib, raw DEFLATE, LZ4 frames,
//!   Snappy framing and Zstd.
//! - [`aes`]: AES-128/192/256 in ECB, CBC, CTR, CFB-128 and OFB, chunked streaming in which any
//!   split gives the same bytes; keys wiped on drop.
//! - [`kernel`]: multi-page CBC encryption (several independent chains at once), batched CTR
//!   and the bulk CRC-32C; which AES kernel runs ([`kernel::aes_kernel`]).
//! - [`keyfile`]: the key file format the CLI reads.
//!
//! On x86-64 with AES-NI, VAES or AVX-512 the AES work runs on hand-written kernels, tested
//! against the RustCrypto crates that run everywhere else. They live in the private `arch`
//! module, the one place that chooses the kernel (`arch/mod.rs`) over leaves that never import
//! it: `arch/ni.rs` (AES-NI on xmm, VAES on ymm), `arch/vaes.rs` (VAES on zmm),
//! `arch/common.rs` (the key schedule, GHASH reduction and one-block loops they share) and
//! `arch/portable.rs` (the portable twins of the batched loops). `arch` is, with `zlib` (FFI),
//! the only place with `unsafe`.
//!
//! ```
//! use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig, Sealer, Unsealer};
//! let key = Key::new(&[0x42; 32])?;
//! let config = SealConfig { compression: Compression::Deflate(1), cipher: Cipher::Cbc };
//! let mut sealer = Sealer::new(config, Some((7, &key)))?;
//! let page = b"a page of a column store, a page of a column store".repeat(80);
//! let record = sealer.seal(&page)?;
//! assert!(record.len() < page.len());
//!
//! let mut ring = KeyRing::new();
//! ring.insert(7, key);
//! assert_eq!(Unsealer::new(&ring).unseal(&record)?, page);
//! # Ok::<(), inpath_seal::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)] // allowed only in `arch` (the hand-written AES kernels) and `zlib` (FFI)

pub mod aes;
mod arch;
pub mod codec;
pub mod error;
pub mod gen;
pub mod kernel;
pub mod keyfile;
pub mod page;
pub mod zlib;

pub use crate::aes::{Key, KeyRing};
pub use error::{Error, Result};
pub use page::{Cipher, Compression, Header, SealConfig, Sealer, Unsealer, Workspace};
