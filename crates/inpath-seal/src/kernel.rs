//! Hot kernels over the block cipher, and the one place where the crate picks its AES kernel
//! ([`aes_kernel`]).
//!
//! # Which AES kernel runs
//!
//! | kernel | what | needs |
//! |---|---|---|
//! | `vaes512` | `crate::vaes`: VAES on 512-bit registers, VPCLMULQDQ GHASH | AVX-512 level, VAES, VPCLMULQDQ |
//! | `vaes256` | `crate::ni`, ymm width: VAES on 256-bit registers (Zen 3+, Alder Lake+) | AVX2 level, VAES, VPCLMULQDQ |
//! | `aesni` | `crate::ni`, xmm width: AES-NI, 12 blocks interleaved | AVX2 level, AES-NI, PCLMULQDQ |
//! | `library` | RustCrypto's `aes`, `ctr`, `cbc`, `cfb-mode`, `ofb`, `aes-gcm` | nothing |
//!
//! The best kernel the CPU has is taken, capped by `INPATH_ISA` ([`inpath_core::isa`]:
//! `portable` gives `library`, `avx2` at most `vaes256`) and by `INPATH_AES`
//! (`library`, `aesni`, `vaes256` or `vaes512`: at most that kernel; `INPATH_AES=library` is the
//! older switch and still works). Every kernel gives the same bytes: the tests run all of them
//! that the CPU has ([`aes_kernels`]) against the library.
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

use crate::aes::{with_aes, AnyAes, Block, Fast};
use aes::cipher::BlockCipherEncrypt;
use inpath_core::isa::{self, Level};
use std::sync::OnceLock;

/// An AES kernel family, lowest first (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AesKernel {
    /// RustCrypto's crates (the `aes` crate uses AES-NI itself where present).
    Library,
    /// AES-NI on 128-bit registers, 12 blocks in flight.
    Aesni,
    /// VAES on 256-bit registers, 16 blocks in flight.
    Vaes256,
    /// VAES on 512-bit registers, 32 blocks in flight.
    Vaes512,
}

impl AesKernel {
    /// Every kernel, lowest first.
    pub const ALL: [AesKernel; 4] = [
        AesKernel::Library,
        AesKernel::Aesni,
        AesKernel::Vaes256,
        AesKernel::Vaes512,
    ];

    /// The name used by `INPATH_AES` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AesKernel::Library => "library",
            AesKernel::Aesni => "aesni",
            AesKernel::Vaes256 => "vaes256",
            AesKernel::Vaes512 => "vaes512",
        }
    }

    /// Parses a kernel name (case-insensitive).
    pub fn parse(s: &str) -> Option<AesKernel> {
        let s = s.trim().to_ascii_lowercase();
        AesKernel::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The `INPATH_ISA` level this kernel belongs to.
    pub fn level(self) -> Level {
        match self {
            AesKernel::Library => Level::Portable,
            AesKernel::Aesni | AesKernel::Vaes256 => Level::Avx2,
            AesKernel::Vaes512 => Level::Avx512,
        }
    }

    /// Whether the CPU has this kernel's instructions (no caps applied).
    pub fn on_cpu(self) -> bool {
        match self {
            AesKernel::Library => true,
            AesKernel::Aesni => crate::ni::Width::Xmm.supported(),
            AesKernel::Vaes256 => crate::ni::Width::Ymm.supported(),
            AesKernel::Vaes512 => crate::vaes::supported(),
        }
    }

    /// Whether this kernel may run: on the CPU and within the `INPATH_ISA` and `INPATH_AES`
    /// caps.
    pub fn allowed(self) -> bool {
        self.level() <= isa::effective() && self <= aes_cap() && self.on_cpu()
    }
}

impl std::fmt::Display for AesKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The environment variable that caps the AES kernel by name.
pub const AES_ENV: &str = "INPATH_AES";

/// The cap from `INPATH_AES` (none when unset or invalid; [`check_env`] reports invalid ones).
fn aes_cap() -> AesKernel {
    static CAP: OnceLock<AesKernel> = OnceLock::new();
    *CAP.get_or_init(|| {
        std::env::var(AES_ENV)
            .ok()
            .and_then(|v| AesKernel::parse(&v))
            .unwrap_or(AesKernel::Vaes512)
    })
}

/// Checks `INPATH_AES`: `Err` names the bad value and the valid ones.
pub fn check_env() -> Result<(), String> {
    match std::env::var(AES_ENV) {
        Ok(v) if AesKernel::parse(&v).is_none() => Err(format!(
            "{AES_ENV}={v:?} is not an AES kernel; use library, aesni, vaes256 or vaes512 (or unset it)"
        )),
        _ => Ok(()),
    }
}

/// The AES kernel this process uses: the best one [`AesKernel::allowed`].
pub fn aes_kernel() -> AesKernel {
    static CHOSEN: OnceLock<AesKernel> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        AesKernel::ALL
            .into_iter()
            .rev()
            .find(|k| k.allowed())
            .unwrap_or(AesKernel::Library)
    })
}

/// Every AES kernel that may run here, lowest first (the tests compare them all).
pub fn aes_kernels() -> Vec<AesKernel> {
    AesKernel::ALL.into_iter().filter(|k| k.allowed()).collect()
}

/// Whether the bulk CRC-32C ([`crc32c_bulk`]) folds with `crc-fast`: where the CPU folds
/// 512-bit registers with VPCLMULQDQ (AVX-512 level, capped by `INPATH_ISA`). Below that,
/// `crc-fast` folds 128-bit registers, and the `crc32c` crate's three interleaved `crc32`
/// instructions are faster (`bench/seal.py` measures both).
pub fn crc_folds_wide() -> bool {
    static WIDE: OnceLock<bool> = OnceLock::new();
    *WIDE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            isa::effective() >= Level::Avx512
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
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

/// Pages a batch in the CBC tier is cut into per call and thread: 16 pages side by side in
/// `vaes512` (four per register) and `vaes256` (two per register), two rounds of 8 in `aesni`.
pub const LANES: usize = 16;

/// CBC-encrypts several independent pages in place. Each lane is `(iv, data)` where `data` is
/// a whole number of 16-byte blocks; lanes may have different lengths. Any number of lanes is
/// accepted; they are processed [`LANES`] at a time.
pub fn cbc_encrypt_lanes(aes: &AnyAes, lanes: &mut [(Block, &mut [u8])]) {
    if let Some(fast) = aes.fast() {
        // The hand-written kernels: one page per 128-bit lane, up to 16 at once (`ni` cuts
        // a group into as many as its width runs side by side).
        for group in lanes.chunks_mut(crate::vaes::MAX_LANES) {
            let mut inner: Vec<([u8; 16], &mut [u8])> = group
                .iter_mut()
                .map(|(iv, data)| ((*iv).into(), &mut **data))
                .collect();
            match fast {
                Fast::V512(keys) => crate::vaes::cbc_encrypt_lanes(keys, &mut inner),
                Fast::Ni(keys) => crate::ni::cbc_encrypt_lanes(keys, &mut inner),
            }
            let chains: Vec<[u8; 16]> = inner.iter().map(|(iv, _)| *iv).collect();
            drop(inner);
            for ((iv, _), chain) in group.iter_mut().zip(chains) {
                *iv = Block::from(chain);
            }
        }
        return;
    }
    for group in lanes.chunks_mut(LANES) {
        with_aes!(aes, c => encrypt_group(c, group));
    }
}

fn encrypt_group<C: BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>>(
    cipher: &C,
    lanes: &mut [(Block, &mut [u8])],
) {
    debug_assert!(lanes.len() <= LANES);
    debug_assert!(lanes.iter().all(|(_, d)| d.len() % 16 == 0));
    let blocks = lanes.iter().map(|(_, d)| d.len() / 16).max().unwrap_or(0);
    let mut batch = [Block::default(); LANES];
    let mut which = [0usize; LANES];
    let mut chains = [0u128; LANES];
    for (chain, (iv, _)) in chains.iter_mut().zip(lanes.iter()) {
        *chain = u128::from_ne_bytes((*iv).into());
    }
    for i in 0..blocks {
        let at = i * 16;
        // Gather block i of every lane still running, XORed with its chain value.
        let mut n = 0;
        for (lane, (_, data)) in lanes.iter().enumerate() {
            if let Some(bytes) = data.get(at..at + 16) {
                let x = u128::from_ne_bytes(bytes.try_into().expect("16 bytes")) ^ chains[lane];
                batch[n] = Block::from(x.to_ne_bytes());
                which[n] = lane;
                n += 1;
            }
        }
        cipher.encrypt_blocks(&mut batch[..n]);
        for (block, &lane) in batch[..n].iter().zip(&which[..n]) {
            lanes[lane].1[at..at + 16].copy_from_slice(block);
            chains[lane] = u128::from_ne_bytes((*block).into());
        }
    }
    for ((iv, _), chain) in lanes.iter_mut().zip(chains) {
        *iv = Block::from(chain.to_ne_bytes());
    }
}

/// Counter blocks encrypted per batch by [`ctr_apply`]: a multiple of the VAES-512 backend's
/// 64 parallel blocks (8 KiB of keystream: stays in L1, amortises the per-call key setup).
const CTR_BATCH: usize = 512;

/// AES-CTR over `data` in place with a 128-bit big-endian counter starting at `iv`: the same
/// bytes as `ctr::Ctr128BE`. The `ctr` crate feeds the cipher's parallel path from a generic
/// counter loop; here the counter blocks are written 512 at a time and encrypted in one call
/// then XORed into the data as 128-bit words: faster than the `ctr` crate, and well below ECB on
/// the same core, so the counter fill and XOR passes, not the AES rounds, are the limit
/// (`bench/seal.py`; docs/PERFORMANCE.md).
pub fn ctr_apply(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    match aes.fast() {
        Some(Fast::V512(keys)) => return crate::vaes::ctr_apply(keys, iv, data),
        Some(Fast::Ni(keys)) => return crate::ni::ctr_apply(keys, iv, data),
        None => {}
    }
    with_aes!(aes, c => ctr_apply_with(c, iv, data));
}

/// As [`ctr_apply`], reading `src` and writing `dst` (of the same length): one pass instead of a
/// copy and an in-place pass (the VAES kernel; elsewhere a copy, then [`ctr_apply`]).
pub fn ctr_apply_to(aes: &AnyAes, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "ctr_apply_to: lengths differ");
    match aes.fast() {
        Some(Fast::V512(keys)) => return crate::vaes::ctr_apply_to(keys, iv, src, dst),
        Some(Fast::Ni(keys)) => return crate::ni::ctr_apply_to(keys, iv, src, dst),
        None => {}
    }
    dst.copy_from_slice(src);
    ctr_apply(aes, iv, dst);
}

fn ctr_apply_with<C: BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>>(
    cipher: &C,
    iv: &[u8; 16],
    data: &mut [u8],
) {
    let mut counter = u128::from_be_bytes(*iv);
    let mut keystream = [Block::default(); CTR_BATCH];
    for chunk in data.chunks_mut(CTR_BATCH * 16) {
        let blocks = chunk.len().div_ceil(16);
        for block in keystream[..blocks].iter_mut() {
            *block = Block::from(counter.to_be_bytes());
            counter = counter.wrapping_add(1);
        }
        cipher.encrypt_blocks(&mut keystream[..blocks]);
        let (words, tail) = chunk.as_chunks_mut::<16>();
        for (word, ks) in words.iter_mut().zip(keystream.iter()) {
            let x = u128::from_ne_bytes(*word) ^ u128::from_ne_bytes((*ks).into());
            *word = x.to_ne_bytes();
        }
        if !tail.is_empty() {
            let ks = &keystream[words.len()];
            for (b, k) in tail.iter_mut().zip(ks.iter()) {
                *b ^= k;
            }
        }
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
