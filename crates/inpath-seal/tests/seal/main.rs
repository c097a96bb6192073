//! The integration tests of `inpath-seal`, in one test binary (one link, one process):
//!
//! - `codec`: the streaming codecs (round trips under any chunking, standard headers,
//!   multi-member and multi-frame inputs, checksums, truncation);
//! - `fuzz`: a brief deterministic fuzz pass over records, streams and the committed corpus
//!   (`tests/corpus`);
//! - `kat`: known-answer tests of the AES layer (FIPS-197, SP 800-38A, the GCM spec), on every
//!   AES kernel the CPU has;
//! - `kernels`: every AES kernel the CPU has (`kernel::aes_kernels()`) against the RustCrypto
//!   crates, and which kernel the process picks under the `INPATH_ISA` cap and the
//!   `INPATH_AES` choice;
//! - `page`: the page codec across every tier, including the page layer on every AES kernel;
//! - `tamper`: damaged and hostile records, each with the one error that names it;
//! - `tools`: interoperability with `gzip`, `lz4`, `zstd` and `openssl enc`.
//!
//! The AES kernels are compared in process (`AnyAes::with_kernel`, `Gcm::with_kernel`,
//! `CipherStream::with_kernel`, `Sealer::with_kernel`, `Unsealer::with_kernel`), so one run on a
//! CPU with VAES and AVX-512 covers all of them; a rerun under `INPATH_ISA=portable` or `avx2`
//! adds nothing for them. No test changes process-wide state (environment, working directory):
//! the kernel choice is read once per process, and the tests only read it.

mod codec;
mod common;
mod fuzz;
mod kat;
mod kernels;
mod page;
mod tamper;
mod tools;
