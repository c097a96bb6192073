//! The one place the crate picks its AES kernel ([`aes_kernel`]) and its CRC-32C library
//! ([`crc_folds_wide`]) for the running CPU, and the dispatch into the kernels.
//!
//! # Which AES kernel runs
//!
//! | kernel | leaf | needs |
//! |---|---|---|
//! | `vaes512` | `vaes`: VAES on 512-bit registers, VPCLMULQDQ GHASH | AVX-512 level, VAES, VPCLMULQDQ |
//! | `vaes256` | `ni`, ymm width: VAES on 256-bit registers (Zen 3+, Alder Lake+) | AVX2 level, VAES, VPCLMULQDQ |
//! | `aesni` | `ni`, xmm width: AES-NI, 12 blocks interleaved | AVX2 level, AES-NI, PCLMULQDQ |
//! | `library` | RustCrypto's `aes`, `ctr`, `cbc`, `cfb-mode`, `ofb`, `aes-gcm`; `portable` | nothing |
//!
//! A kernel may run ([`AesKernel::allowed`]) when the CPU has its instructions and its level
//! is within the one cap, `INPATH_ISA` ([`inpath_core::isa`]: `portable` allows only
//! `library`, `avx2` at most `vaes256`, `avx512` or unset: every kernel). The process runs the
//! best kernel allowed. `INPATH_AES` (`library`, `aesni`, `vaes256` or `vaes512`) is not a
//! second cap but a kernel choice: the process runs the best allowed kernel at or below the
//! one named, so a benchmark or test can measure a lower kernel among those `INPATH_ISA`
//! allows (`INPATH_AES=aesni` measures AES-NI on a VAES machine); it changes nothing else, and
//! every allowed kernel still runs through `AnyAes::with_kernel` and the other
//! `with_kernel` constructors. Every kernel gives the same bytes: the tests run all of them
//! that may run here ([`aes_kernels`]) against the library.
//!
//! # Layout
//!
//! This module is the one that chooses and dispatches; the kernels are leaves that never
//! import it (or anything above it):
//!
//! - `common`: what the vector kernels share, written once: the round keys and their
//!   constant-time key schedule, the GHASH reduction and hash-key powers, the one-block loops
//!   of the sequential modes (CBC encryption of one chain, CFB encryption, OFB), the CTR
//!   counter split, the CBC lane phases, the GCM limit and constant-time tag check;
//! - `ni` (x86-64): AES-NI on xmm and VAES on ymm, the mode loops written once over both
//!   widths (the `kernels!` macro);
//! - `vaes` (x86-64): VAES and VPCLMULQDQ on zmm;
//! - `portable`: the portable twins of the kernels' batched loops (CTR in batches, CBC
//!   encryption across pages) over any RustCrypto cipher.
//!
//! The library front (`src/aes.rs`) holds a [`Keys`] / [`GcmKeys`] beside the RustCrypto
//! cipher and calls them when present; this module imports nothing from it.
#![cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]

mod common;
#[cfg(target_arch = "x86_64")]
mod ni;
pub(crate) mod portable;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod vaes;

pub(crate) use common::{GCM_MAX, MAX_LANES};

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

    /// Whether the CPU has this kernel's instructions (no cap applied).
    pub fn on_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        match self {
            AesKernel::Library => true,
            AesKernel::Aesni => ni::Width::Xmm.supported(),
            AesKernel::Vaes256 => ni::Width::Ymm.supported(),
            AesKernel::Vaes512 => vaes::supported(),
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == AesKernel::Library
        }
    }

    /// Whether this kernel may run: on the CPU and within the `INPATH_ISA` cap.
    pub fn allowed(self) -> bool {
        self.level() <= isa::effective() && self.on_cpu()
    }
}

impl std::fmt::Display for AesKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The environment variable that picks a lower AES kernel by name (a kernel choice within
/// the `INPATH_ISA` cap, for benchmarks and tests; see the module documentation).
pub const AES_ENV: &str = "INPATH_AES";

/// `INPATH_AES` names no AES kernel ([`check_env`]): the ISA cap's error type, with this
/// variable's name and values.
pub use inpath_core::isa::EnvError;

/// The kernel `INPATH_AES` names (`None` when unset or invalid; [`check_env`] reports invalid
/// ones).
pub fn aes_choice() -> Option<AesKernel> {
    static CHOICE: OnceLock<Option<AesKernel>> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        std::env::var(AES_ENV)
            .ok()
            .and_then(|v| AesKernel::parse(&v))
    })
}

/// Checks `INPATH_AES`: the error names the bad value and the valid ones.
pub fn check_env() -> Result<(), EnvError> {
    match std::env::var(AES_ENV) {
        Ok(v) if AesKernel::parse(&v).is_none() => Err(EnvError {
            var: AES_ENV,
            value: v,
            expected: "an AES kernel; use library, aesni, vaes256 or vaes512",
        }),
        _ => Ok(()),
    }
}

/// The AES kernel this process uses: the best one [`AesKernel::allowed`], at or below the one
/// `INPATH_AES` names if it names one.
pub fn aes_kernel() -> AesKernel {
    static CHOSEN: OnceLock<AesKernel> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let choice = aes_choice().unwrap_or(AesKernel::Vaes512);
        AesKernel::ALL
            .into_iter()
            .rev()
            .find(|&k| k <= choice && k.allowed())
            .unwrap_or(AesKernel::Library)
    })
}

/// Every AES kernel that may run here, lowest first (the tests compare them all).
pub fn aes_kernels() -> Vec<AesKernel> {
    AesKernel::ALL.into_iter().filter(|k| k.allowed()).collect()
}

/// Whether the bulk CRC-32C (`kernel::crc32c_bulk`) folds with `crc-fast`: where the
/// CPU folds 512-bit registers with VPCLMULQDQ (AVX-512 level, capped by `INPATH_ISA`).
/// Below that, `crc-fast` folds 128-bit registers, and the `crc32c` crate's three interleaved
/// `crc32` instructions are faster (`bench/seal.py` measures both).
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

// ---------------------------------------------------------------------------------------------
// Dispatch.

/// A vector kernel's expanded round keys (wiped on drop): holding one proves the CPU has that
/// kernel's instructions. Off x86-64 there is none (the enum has no variant).
#[derive(Clone)]
pub(crate) enum Keys {
    /// `ni`, xmm (`aesni`) or ymm (`vaes256`) width.
    #[cfg(target_arch = "x86_64")]
    Ni(ni::Keys),
    /// `vaes` (`vaes512`).
    #[cfg(target_arch = "x86_64")]
    V512(vaes::Keys),
}

/// AES-GCM keys of a vector kernel: [`Keys`] and the hash key's powers (wiped on drop).
#[derive(Clone)]
pub(crate) enum GcmKeys {
    /// `ni`, either width.
    #[cfg(target_arch = "x86_64")]
    Ni(Box<ni::GcmKeys>),
    /// `vaes`.
    #[cfg(target_arch = "x86_64")]
    V512(Box<vaes::GcmKeys>),
}

/// Runs `$body` with `$m` naming the leaf module of `$keys` (a [`Keys`] or [`GcmKeys`]) and
/// `$k` bound to its keys.
macro_rules! on_leaf {
    ($ty:ident, $keys:expr, $m:ident, $k:ident => $body:expr) => {
        match *$keys {
            #[cfg(target_arch = "x86_64")]
            $ty::Ni(ref $k) => {
                use ni as $m;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            $ty::V512(ref $k) => {
                use vaes as $m;
                $body
            }
        }
    };
}

impl Keys {
    /// Expands `key` (16, 24 or 32 bytes) for `kernel`; `None` for `library`, and when the CPU
    /// lacks the kernel's instructions (the caller checks the cap).
    pub(crate) fn new(key: &[u8], kernel: AesKernel) -> Option<Keys> {
        #[cfg(target_arch = "x86_64")]
        match kernel {
            AesKernel::Library => None,
            AesKernel::Aesni => ni::Keys::new(key, ni::Width::Xmm).map(Keys::Ni),
            AesKernel::Vaes256 => ni::Keys::new(key, ni::Width::Ymm).map(Keys::Ni),
            AesKernel::Vaes512 => vaes::Keys::new(key).map(Keys::V512),
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// The round keys every kernel shares (for the one-block loops of `common`).
    fn round_keys(&self) -> &common::RoundKeys {
        match *self {
            #[cfg(target_arch = "x86_64")]
            Keys::Ni(ref k) => k,
            #[cfg(target_arch = "x86_64")]
            Keys::V512(ref k) => k,
        }
    }

    /// The kernel these keys are for.
    pub(crate) fn kernel(&self) -> AesKernel {
        match *self {
            #[cfg(target_arch = "x86_64")]
            Keys::Ni(ref k) if k.width() == ni::Width::Ymm => AesKernel::Vaes256,
            #[cfg(target_arch = "x86_64")]
            Keys::Ni(_) => AesKernel::Aesni,
            #[cfg(target_arch = "x86_64")]
            Keys::V512(_) => AesKernel::Vaes512,
        }
    }

    /// ECB encryption of whole blocks in place.
    pub(crate) fn ecb_encrypt(&self, data: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::ecb_encrypt(k, data))
    }

    /// ECB decryption of whole blocks in place.
    pub(crate) fn ecb_decrypt(&self, data: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::ecb_decrypt(k, data))
    }

    /// Encrypts one block in place.
    pub(crate) fn encrypt_block(&self, block: &mut [u8; 16]) {
        common::encrypt_block(self.round_keys(), block)
    }

    /// CTR over `data` in place (any length), 128-bit big-endian counter from `iv`.
    pub(crate) fn ctr_apply(&self, iv: &[u8; 16], data: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::ctr_apply(k, iv, data))
    }

    /// As [`Keys::ctr_apply`] from `src` into `dst` (the same length).
    pub(crate) fn ctr_apply_to(&self, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::ctr_apply_to(k, iv, src, dst))
    }

    /// CBC encryption of one chain of whole blocks in place; `iv` becomes the last ciphertext
    /// block.
    pub(crate) fn cbc_encrypt(&self, iv: &mut [u8; 16], data: &mut [u8]) {
        common::chain::<{ common::CBC }>(self.round_keys(), iv, data)
    }

    /// CBC decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cbc_decrypt(&self, iv: &mut [u8; 16], data: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::cbc_decrypt(k, iv, data))
    }

    /// CFB-128 encryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_encrypt(&self, iv: &mut [u8; 16], data: &mut [u8]) {
        common::chain::<{ common::CFB }>(self.round_keys(), iv, data)
    }

    /// CFB-128 decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_decrypt(&self, iv: &mut [u8; 16], data: &mut [u8]) {
        on_leaf!(Keys, self, m, k => m::cfb_decrypt(k, iv, data))
    }

    /// OFB over whole blocks in place; `iv` becomes the last keystream block.
    pub(crate) fn ofb_apply(&self, iv: &mut [u8; 16], data: &mut [u8]) {
        common::chain::<{ common::OFB }>(self.round_keys(), iv, data)
    }

    /// CBC-encrypts up to [`MAX_LANES`] independent pages in place, side by side: each lane is
    /// `(iv, data)` with `data` whole blocks, of any lengths; each `iv` becomes the lane's
    /// last ciphertext block.
    pub(crate) fn cbc_encrypt_lanes(&self, lanes: &mut [([u8; 16], &mut [u8])]) {
        on_leaf!(Keys, self, m, k => m::cbc_encrypt_lanes(k, lanes))
    }
}

impl GcmKeys {
    /// GCM keys for `kernel` over a 32-byte key; `None` as for [`Keys::new`].
    pub(crate) fn new(key: &[u8], kernel: AesKernel) -> Option<GcmKeys> {
        #[cfg(target_arch = "x86_64")]
        match Keys::new(key, kernel)? {
            Keys::Ni(k) => Some(GcmKeys::Ni(Box::new(common::GcmKeys::new(k)))),
            Keys::V512(k) => Some(GcmKeys::V512(Box::new(common::GcmKeys::new(k)))),
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// The kernel these keys are for.
    pub(crate) fn kernel(&self) -> AesKernel {
        match *self {
            #[cfg(target_arch = "x86_64")]
            GcmKeys::Ni(ref k) if k.aes.width() == ni::Width::Ymm => AesKernel::Vaes256,
            #[cfg(target_arch = "x86_64")]
            GcmKeys::Ni(_) => AesKernel::Aesni,
            #[cfg(target_arch = "x86_64")]
            GcmKeys::V512(_) => AesKernel::Vaes512,
        }
    }

    /// AES-GCM encryption in place; returns the tag. At most [`GCM_MAX`] bytes (checked by
    /// the caller).
    pub(crate) fn encrypt(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8]) -> [u8; 16] {
        on_leaf!(GcmKeys, self, m, k => m::gcm_encrypt(k, nonce, aad, data))
    }

    /// AES-GCM decryption in place: whether the tag matches. When it does not, the data is
    /// encrypted back, so a refused message is left as it was.
    pub(crate) fn decrypt(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        if data.len() as u64 > GCM_MAX {
            return false;
        }
        on_leaf!(GcmKeys, self, m, k => {
            let expected = m::gcm_decrypt(k, nonce, aad, data);
            if !common::tags_equal(&expected, tag) {
                m::ctr_apply(&k.aes, &common::gcm_counter(nonce), data);
                return false;
            }
            true
        })
    }

    /// AES-GCM decryption from `src` into `dst` (the same length, at most [`GCM_MAX`] bytes:
    /// both checked by the caller, which also wipes `dst` when the tag does not match),
    /// stitched: no copy first. Whether the tag matches (compared in constant time).
    pub(crate) fn decrypt_to(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        src: &[u8],
        dst: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        on_leaf!(GcmKeys, self, m, k => {
            common::tags_equal(&m::gcm_decrypt_to(k, nonce, aad, src, dst), tag)
        })
    }
}
