//! Hot kernels over the block cipher: multi-page CBC encryption ([`cbc_encrypt_lanes`]) and
//! batched CTR ([`ctr_apply`], [`ctr_apply_to`]) on an [`AnyAes`], and the bulk CRC-32C of the
//! page layer ([`crc32c_bulk`]).
//!
//! Which AES kernel runs is chosen in one place, the private `arch` module, re-exported here:
//! [`aes_kernel`] (the process's kernel), [`aes_kernels`] (every kernel that may run here),
//! [`AesKernel`], [`check_env`].
//!
//! | kernel | what | needs |
//! |---|---|---|
//! | `vaes512` | VAES on 512-bit registers, VPCLMULQDQ GHASH | AVX-512 level, VAES, VPCLMULQDQ |
//! | `vaes256` | VAES on 256-bit registers (Zen 3+, Alder Lake+) | AVX2 level, VAES, VPCLMULQDQ |
//! | `aesni` | AES-NI on 128-bit registers, 12 blocks interleaved | AVX2 level, AES-NI, PCLMULQDQ |
//! | `library` | RustCrypto's `aes`, `ctr`, `cbc`, `cfb-mode`, `ofb`, `aes-gcm` | nothing |
//!
//! The best kernel the CPU has within the one cap, `INPATH_ISA` ([`inpath_core::isa`]:
//! `portable` gives `library`, `avx2` at most `vaes256`), is taken. `INPATH_AES` (`library`,
//! `aesni`, `vaes256` or `vaes512`) is a kernel choice, not a second cap: the process then runs
//! the best allowed kernel at or below the one named (how the benchmarks measure the lower
//! kernels on one machine); every allowed kernel stays available to the `with_kernel`
//! constructors. Every kernel gives the same bytes: the tests run all of them that may run
//! here ([`aes_kernels`]) against the library.
//!
//! # CBC across pages
//!
//! CBC encryption is a chain: block `i` needs the ciphertext of block `i - 1`, so one page runs
//! at the latency of the AES rounds, not their throughput (several times slower than CTR).
//! Pages are independent, though, so [`cbc_encrypt_lanes`] walks up to [`LANES`] pages side by
//! side and encrypts block `i` of every page at once (each 128-bit lane of a register is a
//! different page: 4 per register in `vaes512`, 2 in `vaes256`, 1 in `aesni`), which keeps
//! the AES units busy. The output of each page is exactly the plain library CBC output (the
//! tests compare them for every key size and uneven page lengths).

use crate::aes::{with_aes, AnyAes, Block};
use crate::arch;

pub use crate::aes::{ctr_apply, ctr_apply_to};
pub use crate::arch::{
    aes_choice, aes_kernel, aes_kernels, check_env, crc_folds_wide, AesKernel, EnvError, AES_ENV,
};

/// Pages a batch in the CBC tier is cut into per call and thread: 16 pages side by side in
/// `vaes512` (four per register) and `vaes256` (two per register), two rounds of 8 in `aesni`.
pub const LANES: usize = arch::portable::LANES;

/// CBC-encrypts several independent pages in place. Each lane is `(iv, data)` where `data` is
/// a whole number of 16-byte blocks; lanes may have different lengths. Any number of lanes is
/// accepted; they are processed [`LANES`] at a time.
pub fn cbc_encrypt_lanes(aes: &AnyAes, lanes: &mut [(Block, &mut [u8])]) {
    if let Some(fast) = aes.fast() {
        // The hand-written kernels: one page per 128-bit lane, up to 16 at once (`ni` cuts
        // a group into as many as its width runs side by side).
        for group in lanes.chunks_mut(arch::MAX_LANES) {
            let mut inner: Vec<([u8; 16], &mut [u8])> = group
                .iter_mut()
                .map(|(iv, data)| ((*iv).into(), &mut **data))
                .collect();
            fast.cbc_encrypt_lanes(&mut inner);
            let chains: Vec<[u8; 16]> = inner.iter().map(|(iv, _)| *iv).collect();
            drop(inner);
            for ((iv, _), chain) in group.iter_mut().zip(chains) {
                *iv = Block::from(chain);
            }
        }
        return;
    }
    for group in lanes.chunks_mut(LANES) {
        with_aes!(aes, c => arch::portable::cbc_encrypt_group(c, group));
    }
}

/// CRC-32C (Castagnoli) of a page or payload, by the faster library for this CPU
/// ([`crc_folds_wide`]): `crc-fast` (several times the `crc32c` crate on AVX-512 CPUs) or the
/// `crc32c` crate. Both compute the same function (tested).
pub fn crc32c_bulk(data: &[u8]) -> u32 {
    crc32c_bulk_with(crc_folds_wide(), data)
}

/// [`crc32c_bulk`] by the library named (`wide`: `crc-fast`).
pub fn crc32c_bulk_with(wide: bool, data: &[u8]) -> u32 {
    if wide {
        crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
    } else {
        crc32c::crc32c(data)
    }
}

/// A running CRC-32C over data that comes in pieces, by the library [`crc32c_bulk`] uses.
// (It lives on the stack for one call; boxing the wide digest would allocate a page.)
#[allow(clippy::large_enum_variant)]
pub enum Crc32cDigest {
    /// `crc-fast`'s digest.
    Wide(crc_fast::Digest),
    /// The `crc32c` crate's CRC so far.
    Narrow(u32),
}

impl Crc32cDigest {
    /// An empty digest by the library [`crc_folds_wide`] picks.
    pub fn new() -> Crc32cDigest {
        Crc32cDigest::with(crc_folds_wide())
    }

    /// An empty digest by the library named (`wide`: `crc-fast`).
    pub fn with(wide: bool) -> Crc32cDigest {
        if wide {
            Crc32cDigest::Wide(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
        } else {
            Crc32cDigest::Narrow(0)
        }
    }

    /// Adds the next piece.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Crc32cDigest::Wide(d) => d.update(data),
            Crc32cDigest::Narrow(c) => *c = crc32c::crc32c_append(*c, data),
        }
    }

    /// The CRC of every piece so far.
    pub fn finalize(&self) -> u32 {
        match self {
            Crc32cDigest::Wide(d) => d.finalize() as u32,
            Crc32cDigest::Narrow(c) => *c,
        }
    }
}

impl Default for Crc32cDigest {
    fn default() -> Self {
        Crc32cDigest::new()
    }
}

#[cfg(test)]
mod crc_tests {
    use super::*;

    /// Both libraries give the same CRC-32C, in one piece or many (in pieces of odd sizes and
    /// of the 16 KiB the page layer's fused copy uses), and the check value of RFC 3720 (B.4)
    /// for "123456789"; both run in every process, whichever [`crc_folds_wide`] picks for the
    /// page layer (`crc-fast` folds 128-bit registers where it has no 512-bit ones).
    #[test]
    fn both_crc_libraries_agree() {
        for wide in [false, true] {
            assert_eq!(crc32c_bulk_with(wide, b"123456789"), 0xe306_9283);
        }
        let data: Vec<u8> = (0..100_003u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 15, 16, 63, 64, 255, 4096, 65_537, data.len()] {
            let want = crc32c_bulk_with(false, &data[..len]);
            assert_eq!(crc32c_bulk_with(true, &data[..len]), want, "{len} bytes");
            assert_eq!(crc32c_bulk(&data[..len]), want, "{len} bytes");
            for wide in [false, true] {
                for size in [1000 + len % 7, 16 << 10] {
                    let mut d = Crc32cDigest::with(wide);
                    for piece in data[..len].chunks(size) {
                        d.update(piece);
                    }
                    assert_eq!(d.finalize(), want, "{len} bytes in {size}s, wide {wide}");
                }
            }
            let mut d = Crc32cDigest::new();
            d.update(&data[..len]);
            assert_eq!(d.finalize(), want, "{len} bytes, the process's choice");
        }
    }
}
