//! Hand-written AES kernels for x86-64 CPUs with VAES and AVX-512 (Ice Lake and later, Zen 4
//! and later): ECB, CTR, CBC decryption and CFB decryption four blocks per instruction with
//! eight 512-bit registers in flight; CBC encryption of up to 16 independent pages side by side
//! (each 128-bit lane of a register is a different page, so the chain latency is hidden); and
//! one-block AES-NI loops for the inherently sequential CFB encryption and OFB.
//!
//! # Why this module has `unsafe`
//!
//! The crate forbids `unsafe` everywhere else. RustCrypto's `aes` crate (the library path, used
//! when these instructions are missing) encrypts calls of fewer than 64 blocks one block at a
//! time and prepares its round keys on every call, which made CTR, multi-page CBC and CFB
//! decryption several times slower than the AES units allow (`bench/seal.py`). The
//! intrinsics need `#[target_feature]` functions, which are `unsafe` to call, and raw-pointer
//! loads and stores. Every call into a `#[target_feature]` function here is made only through a
//! [`RoundKeys`], which can only be built after a run-time check that the CPU has every feature
//! the kernels enable; every pointer access stays inside the slice it comes from (lengths are
//! checked or masked, see each function).
//!
//! # Tests
//!
//! The `kernels` module of the integration tests (`tests/seal/kernels.rs`) compares every
//! kernel with the `aes`/`ctr`/`cbc`/`cfb-mode`/`ofb` crates for all key sizes, lengths
//! 0..=300 bytes and large, unaligned slices, counter wraps and every chunking of the
//! streaming API; the key expansion is checked against FIPS-197 Appendix A.
//! `INPATH_AES=library` in the environment turns these kernels off (the library path runs).
#![allow(unsafe_code)]

use zeroize::Zeroize;

/// Expanded round keys for the kernels (encryption and the equivalent inverse cipher's
/// decryption keys). Wiped on drop. Holding one proves the CPU has the kernels' features.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
#[derive(Clone)]
pub(crate) struct RoundKeys {
    rounds: usize,
    enc: [[u8; 16]; 15],
    dec: [[u8; 16]; 15],
}

impl Drop for RoundKeys {
    fn drop(&mut self) {
        self.enc.zeroize();
        self.dec.zeroize();
    }
}

/// Whether the CPU has what the kernels need (and `INPATH_AES=library` does not turn them off).
pub(crate) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        if std::env::var_os("INPATH_AES").is_some_and(|v| v == "library") {
            return false;
        }
        detect()
    })
}

#[cfg(target_arch = "x86_64")]
fn detect() -> bool {
    std::arch::is_x86_feature_detected!("aes")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("vaes")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> bool {
    false
}

impl RoundKeys {
    /// Expands a 16-, 24- or 32-byte key, or `None` when the CPU lacks the kernels' features
    /// (or the key length is wrong).
    pub(crate) fn new(key: &[u8]) -> Option<RoundKeys> {
        if !supported() || !matches!(key.len(), 16 | 24 | 32) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `supported()` checked the `aes` and `sse4.1` features at run time.
            Some(unsafe { x86::expand(key) })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// The encryption round keys (`rounds + 1` of them), for the key-expansion tests.
    #[cfg(test)]
    pub(crate) fn encryption_keys(&self) -> &[[u8; 16]] {
        &self.enc[..=self.rounds]
    }
}

/// AES-GCM keys for the kernels: the block cipher's round keys and the powers `H^1..H^16` of
/// the hash key (byte-reflected, as the carry-less multiplication works on them). Wiped on drop.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
#[derive(Clone)]
pub(crate) struct GcmKeys {
    aes: RoundKeys,
    h: [[u8; 16]; 16],
}

impl Drop for GcmKeys {
    fn drop(&mut self) {
        self.h.zeroize();
    }
}

/// Largest GCM plaintext: 2^32 - 2 blocks (NIST SP 800-38D, 2^39 - 256 bits).
pub(crate) const GCM_MAX: u64 = ((1u64 << 32) - 2) * 16;

impl GcmKeys {
    /// GCM keys over `aes` (any key size).
    pub(crate) fn new(aes: RoundKeys) -> GcmKeys {
        #[cfg(target_arch = "x86_64")]
        {
            let mut keys = GcmKeys {
                aes,
                h: [[0u8; 16]; 16],
            };
            // SAFETY: a `RoundKeys` exists only when `supported()` found every feature.
            unsafe { x86::gcm_powers(&mut keys) };
            keys
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            GcmKeys {
                aes,
                h: [[0u8; 16]; 16],
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{gcm_decrypt, gcm_decrypt_to, gcm_encrypt};

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{
    cbc_decrypt, cbc_encrypt, cbc_encrypt_lanes, cfb_decrypt, cfb_encrypt, ctr_apply, ctr_apply_to,
    ecb_decrypt, ecb_encrypt, encrypt_block, ofb_apply, MAX_LANES,
};

#[cfg(not(target_arch = "x86_64"))]
pub(crate) use portable_stubs::*;

/// On other architectures no [`RoundKeys`] is ever built, so these are never reached.
#[cfg(not(target_arch = "x86_64"))]
mod portable_stubs {
    use super::RoundKeys;
    pub(crate) const MAX_LANES: usize = 16;
    pub(crate) fn ecb_encrypt(_: &RoundKeys, _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn ecb_decrypt(_: &RoundKeys, _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn ctr_apply(_: &RoundKeys, _: &[u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn ctr_apply_to(_: &RoundKeys, _: &[u8; 16], _: &[u8], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn cbc_decrypt(_: &RoundKeys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn cbc_encrypt(_: &RoundKeys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn cfb_decrypt(_: &RoundKeys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn cfb_encrypt(_: &RoundKeys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn ofb_apply(_: &RoundKeys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn encrypt_block(_: &RoundKeys, _: &mut [u8; 16]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn cbc_encrypt_lanes(_: &RoundKeys, _: &mut [([u8; 16], &mut [u8])]) {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn gcm_encrypt(
        _: &super::GcmKeys,
        _: &[u8; 12],
        _: &[u8],
        _: &mut [u8],
    ) -> [u8; 16] {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn gcm_decrypt(
        _: &super::GcmKeys,
        _: &[u8; 12],
        _: &[u8],
        _: &mut [u8],
        _: &[u8; 16],
    ) -> bool {
        unreachable!("no RoundKeys on this architecture")
    }
    pub(crate) fn gcm_decrypt_to(
        _: &super::GcmKeys,
        _: &[u8; 12],
        _: &[u8],
        _: &[u8],
        _: &mut [u8],
        _: &[u8; 16],
    ) -> bool {
        unreachable!("no RoundKeys on this architecture")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{GcmKeys, RoundKeys, GCM_MAX};
    use crate::ni;
    use std::arch::x86_64::*;
    use zeroize::Zeroize;

    /// Pages [`cbc_encrypt_lanes`] encrypts side by side (four per 512-bit register).
    pub(crate) const MAX_LANES: usize = 16;

    /// Blocks per main-loop iteration of the parallel modes: 8 registers of 4 blocks.
    const WIDE: usize = 32;

    // ---------------------------------------------------------------------------------------
    // Key expansion (FIPS-197 §5.2): the constant-time schedule of `crate::ni`.

    /// Expands `key` (16, 24 or 32 bytes, checked by the caller) with the shared key schedule
    /// of `crate::ni`.
    ///
    /// # Safety
    /// The CPU must have AES-NI and SSE4.1.
    #[target_feature(enable = "aes,sse4.1")]
    pub(super) unsafe fn expand(key: &[u8]) -> RoundKeys {
        let mut keys = RoundKeys {
            rounds: 0,
            enc: [[0u8; 16]; 15],
            dec: [[0u8; 16]; 15],
        };
        // SAFETY: the caller's guarantee.
        keys.rounds = unsafe { ni::expand_into(key, &mut keys.enc, &mut keys.dec) };
        keys
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load128(bytes: &[u8; 16]) -> __m128i {
        // SAFETY: 16 readable bytes.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store128(bytes: &mut [u8; 16], x: __m128i) {
        // SAFETY: 16 writable bytes.
        unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), x) }
    }

    // ---------------------------------------------------------------------------------------
    // Register helpers. Every function below is only called from functions with the same or
    // more target features, so they inline.

    /// Round keys broadcast to all four lanes, indexes `0..=NR`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn broadcast(keys: &[[u8; 16]; 15]) -> [__m512i; 15] {
        let mut out = [_mm512_setzero_si512(); 15];
        for (o, k) in out.iter_mut().zip(keys) {
            *o = _mm512_broadcast_i32x4(load128(k));
        }
        out
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn encrypt_regs<const NR: usize, const N: usize>(rk: &[__m512i; 15], x: &mut [__m512i; N]) {
        for v in x.iter_mut() {
            *v = _mm512_xor_si512(*v, rk[0]);
        }
        for k in &rk[1..NR] {
            for v in x.iter_mut() {
                *v = _mm512_aesenc_epi128(*v, *k);
            }
        }
        for v in x.iter_mut() {
            *v = _mm512_aesenclast_epi128(*v, rk[NR]);
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn decrypt_regs<const NR: usize, const N: usize>(rk: &[__m512i; 15], x: &mut [__m512i; N]) {
        for v in x.iter_mut() {
            *v = _mm512_xor_si512(*v, rk[0]);
        }
        for k in &rk[1..NR] {
            for v in x.iter_mut() {
                *v = _mm512_aesdec_epi128(*v, *k);
            }
        }
        for v in x.iter_mut() {
            *v = _mm512_aesdeclast_epi128(*v, rk[NR]);
        }
    }

    /// Loads 64 bytes from `bytes[at..at + 64]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn load512(bytes: &[u8], at: usize) -> __m512i {
        assert!(at + 64 <= bytes.len());
        // SAFETY: bounds checked above.
        unsafe { _mm512_loadu_si512(bytes.as_ptr().add(at).cast()) }
    }

    /// Stores 64 bytes to `bytes[at..at + 64]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn store512(bytes: &mut [u8], at: usize, x: __m512i) {
        assert!(at + 64 <= bytes.len());
        // SAFETY: bounds checked above.
        unsafe { _mm512_storeu_si512(bytes.as_mut_ptr().add(at).cast(), x) }
    }

    /// Mask of the first `n` bytes of a register (`n < 64`).
    #[inline]
    fn byte_mask(n: usize) -> __mmask64 {
        debug_assert!(n < 64);
        (1u64 << n) - 1
    }

    /// Loads `bytes[at..]` (fewer than 64 bytes), zero above; the masked load reads nothing
    /// outside the mask.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn load_partial(bytes: &[u8], at: usize) -> __m512i {
        let n = bytes.len() - at;
        // SAFETY: only the first `n` bytes from `at`, all inside `bytes`, are read.
        unsafe { _mm512_maskz_loadu_epi8(byte_mask(n), bytes.as_ptr().add(at).cast()) }
    }

    /// Stores the first `bytes.len() - at` (< 64) bytes of `x` to `bytes[at..]`.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn store_partial(bytes: &mut [u8], at: usize, x: __m512i) {
        let n = bytes.len() - at;
        // SAFETY: only the first `n` bytes from `at`, all inside `bytes`, are written.
        unsafe { _mm512_mask_storeu_epi8(bytes.as_mut_ptr().add(at).cast(), byte_mask(n), x) }
    }

    /// Runs `$body` with the const `$nr` set to the key's number of rounds.
    macro_rules! by_rounds {
        ($keys:expr, $nr:ident => $body:expr) => {
            match $keys.rounds {
                10 => {
                    const $nr: usize = 10;
                    $body
                }
                12 => {
                    const $nr: usize = 12;
                    $body
                }
                _ => {
                    const $nr: usize = 14;
                    $body
                }
            }
        };
    }

    // ---------------------------------------------------------------------------------------
    // ECB.

    /// ECB encryption of whole blocks in place.
    pub(crate) fn ecb_encrypt(keys: &RoundKeys, data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        // SAFETY: a `RoundKeys` exists only when `supported()` found every feature enabled.
        by_rounds!(keys, NR => unsafe { ecb::<NR, false>(keys, data) })
    }

    /// ECB decryption of whole blocks in place.
    pub(crate) fn ecb_decrypt(keys: &RoundKeys, data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        // SAFETY: as in `ecb_encrypt`.
        by_rounds!(keys, NR => unsafe { ecb::<NR, true>(keys, data) })
    }

    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn ecb<const NR: usize, const DECRYPT: bool>(keys: &RoundKeys, data: &mut [u8]) {
        let rk = broadcast(if DECRYPT { &keys.dec } else { &keys.enc });
        let mut at = 0;
        while at + WIDE * 16 <= data.len() {
            let mut x = [_mm512_setzero_si512(); 8];
            for (i, v) in x.iter_mut().enumerate() {
                *v = load512(data, at + 64 * i);
            }
            if DECRYPT {
                decrypt_regs::<NR, 8>(&rk, &mut x);
            } else {
                encrypt_regs::<NR, 8>(&rk, &mut x);
            }
            for (i, v) in x.iter().enumerate() {
                store512(data, at + 64 * i, *v);
            }
            at += WIDE * 16;
        }
        while at < data.len() {
            let full = at + 64 <= data.len();
            let mut x = [if full {
                load512(data, at)
            } else {
                load_partial(data, at)
            }];
            if DECRYPT {
                decrypt_regs::<NR, 1>(&rk, &mut x);
            } else {
                encrypt_regs::<NR, 1>(&rk, &mut x);
            }
            if full {
                store512(data, at, x[0]);
            } else {
                store_partial(data, at, x[0]);
            }
            at += 64;
        }
    }

    // ---------------------------------------------------------------------------------------
    // CTR with a 128-bit big-endian counter.

    /// XORs the CTR keystream into `data` (any length), counter block starting at `iv` and
    /// incremented as a 128-bit big-endian integer: the same bytes as `ctr::Ctr128BE`.
    pub(crate) fn ctr_apply(keys: &RoundKeys, iv: &[u8; 16], data: &mut [u8]) {
        ctr_segments(iv, data.len(), |counter, range| {
            // SAFETY: as in `ecb_encrypt`.
            by_rounds!(keys, NR => unsafe {
                ctr32::<NR, false>(keys, counter, &[], &mut data[range])
            })
        });
    }

    /// As [`ctr_apply`], reading `src` and writing `dst` (of the same length).
    pub(crate) fn ctr_apply_to(keys: &RoundKeys, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
        assert_eq!(src.len(), dst.len());
        ctr_segments(iv, src.len(), |counter, range| {
            // SAFETY: as in `ecb_encrypt`.
            by_rounds!(keys, NR => unsafe {
                ctr32::<NR, true>(keys, counter, &src[range.clone()], &mut dst[range])
            })
        });
    }

    /// Splits `len` bytes of CTR where the low 32-bit word of the counter wraps (the kernel
    /// adds to that word only) and calls `run(first counter block, byte range)` for each piece,
    /// carrying into the upper 96 bits here.
    fn ctr_segments(
        iv: &[u8; 16],
        len: usize,
        mut run: impl FnMut(&[u8; 16], std::ops::Range<usize>),
    ) {
        let mut counter = u128::from_be_bytes(*iv);
        let mut at = 0;
        while at < len {
            let room = (1u64 << 32) - u64::from(counter as u32); // blocks before the low word wraps
            let take = ((len - at) as u64).min(room * 16) as usize;
            run(&counter.to_be_bytes(), at..at + take);
            counter = counter.wrapping_add(u128::from(room));
            at += take;
        }
    }

    /// The first register of counter blocks from `block` (blocks +0..+3, each kept with its
    /// low word little-endian so that VPADDD counts), the shuffle that byte-swaps them back
    /// before encryption, and the step of four blocks.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn counter_lanes(block: &[u8; 16]) -> (__m512i, __m512i, __m512i) {
        let mut le = *block;
        le[12..16].reverse();
        let swap = _mm512_broadcast_i32x4(_mm_set_epi8(
            12, 13, 14, 15, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
        ));
        let ctr = _mm512_add_epi32(
            _mm512_broadcast_i32x4(load128(&le)),
            _mm512_set_epi32(3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
        );
        le.zeroize();
        let four = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0);
        (ctr, swap, four)
    }

    /// CTR where the low 32-bit word of the counter does not wrap within `data`'s blocks; in
    /// place, or (`OUT`) from `src` to `data`.
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn ctr32<const NR: usize, const OUT: bool>(
        keys: &RoundKeys,
        block: &[u8; 16],
        src: &[u8],
        data: &mut [u8],
    ) {
        debug_assert!(!OUT || src.len() == data.len());
        let rk = broadcast(&keys.enc);
        let (mut ctr, swap, four) = counter_lanes(block);
        let mut at = 0;
        while at + WIDE * 16 <= data.len() {
            let mut x = [_mm512_setzero_si512(); 8];
            for v in x.iter_mut() {
                *v = _mm512_shuffle_epi8(ctr, swap);
                ctr = _mm512_add_epi32(ctr, four);
            }
            encrypt_regs::<NR, 8>(&rk, &mut x);
            for (i, v) in x.iter().enumerate() {
                let d = load512(if OUT { src } else { data }, at + 64 * i);
                store512(data, at + 64 * i, _mm512_xor_si512(d, *v));
            }
            at += WIDE * 16;
        }
        while at < data.len() {
            let mut x = [_mm512_shuffle_epi8(ctr, swap)];
            ctr = _mm512_add_epi32(ctr, four);
            encrypt_regs::<NR, 1>(&rk, &mut x);
            if at + 64 <= data.len() {
                let d = load512(if OUT { src } else { data }, at);
                store512(data, at, _mm512_xor_si512(d, x[0]));
            } else {
                let d = load_partial(if OUT { src } else { data }, at);
                store_partial(data, at, _mm512_xor_si512(d, x[0]));
            }
            at += 64;
        }
    }

    // ---------------------------------------------------------------------------------------
    // CBC decryption and CFB decryption: parallel, with the previous ciphertext block of each
    // block assembled from registers (the data is decrypted in place, so it cannot be re-read).

    /// CBC decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cbc_decrypt(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        chained_decrypt::<true>(keys, iv, data);
    }

    /// CFB-128 decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_decrypt(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        chained_decrypt::<false>(keys, iv, data);
    }

    fn chained_decrypt<const CBC: bool>(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        if data.is_empty() {
            return;
        }
        let last: [u8; 16] = data[data.len() - 16..].try_into().expect("16 bytes");
        // SAFETY: as in `ecb_encrypt`.
        by_rounds!(keys, NR => unsafe { chained::<NR, CBC>(keys, iv, data) });
        *iv = last;
    }

    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn chained<const NR: usize, const CBC: bool>(keys: &RoundKeys, iv: &[u8; 16], data: &mut [u8]) {
        let rk = broadcast(if CBC { &keys.dec } else { &keys.enc });
        // `carry` holds the ciphertext block before the current register in its lane 3.
        let mut carry = _mm512_broadcast_i32x4(load128(iv));
        let mut at = 0;
        while at + WIDE * 16 <= data.len() {
            let mut c = [_mm512_setzero_si512(); 8];
            for (i, v) in c.iter_mut().enumerate() {
                *v = load512(data, at + 64 * i);
            }
            let mut prev = [_mm512_setzero_si512(); 8];
            prev[0] = _mm512_alignr_epi64::<6>(c[0], carry);
            for i in 1..8 {
                prev[i] = _mm512_alignr_epi64::<6>(c[i], c[i - 1]);
            }
            carry = c[7];
            if CBC {
                decrypt_regs::<NR, 8>(&rk, &mut c);
                for i in 0..8 {
                    store512(data, at + 64 * i, _mm512_xor_si512(c[i], prev[i]));
                }
            } else {
                let cipher = c;
                encrypt_regs::<NR, 8>(&rk, &mut prev);
                for i in 0..8 {
                    store512(data, at + 64 * i, _mm512_xor_si512(cipher[i], prev[i]));
                }
            }
            at += WIDE * 16;
        }
        while at < data.len() {
            let full = at + 64 <= data.len();
            let c = if full {
                load512(data, at)
            } else {
                load_partial(data, at)
            };
            let mut p = [_mm512_alignr_epi64::<6>(c, carry)];
            carry = c;
            let out = if CBC {
                let mut d = [c];
                decrypt_regs::<NR, 1>(&rk, &mut d);
                _mm512_xor_si512(d[0], p[0])
            } else {
                encrypt_regs::<NR, 1>(&rk, &mut p);
                _mm512_xor_si512(c, p[0])
            };
            if full {
                store512(data, at, out);
            } else {
                store_partial(data, at, out);
            }
            at += 64;
        }
    }

    // ---------------------------------------------------------------------------------------
    // Sequential modes, one block at a time (the chain allows nothing else): CFB encryption
    // and OFB, and single blocks.

    /// Encrypts one block in place.
    pub(crate) fn encrypt_block(keys: &RoundKeys, block: &mut [u8; 16]) {
        // SAFETY: a `RoundKeys` proves AES-NI and SSE4.1 (see `ecb_encrypt`).
        unsafe { ni::encrypt_block_in(&keys.table(), block) }
    }

    /// CFB-128 encryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_encrypt(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { ni::chain_in::<{ ni::CFB }>(&keys.table(), iv, data) }
    }

    /// OFB over whole blocks in place; `iv` becomes the last keystream block.
    pub(crate) fn ofb_apply(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { ni::chain_in::<{ ni::OFB }>(&keys.table(), iv, data) }
    }

    /// CBC encryption of one chain of whole blocks in place; `iv` becomes the last ciphertext
    /// block.
    pub(crate) fn cbc_encrypt(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { ni::chain_in::<{ ni::CBC }>(&keys.table(), iv, data) }
    }

    impl RoundKeys {
        /// The encryption keys as the shared one-block loops of `crate::ni` take them: the
        /// chained modes are one AES-NI block at a time whatever the vector width.
        fn table(&self) -> ni::RoundTable<'_> {
            ni::RoundTable {
                enc: &self.enc,
                rounds: self.rounds,
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // CBC encryption across pages.

    /// CBC-encrypts up to [`MAX_LANES`] independent pages in place, side by side. Each lane is
    /// `(iv, data)` with `data` whole blocks; lanes may differ in length. Each `iv` becomes
    /// the lane's last ciphertext block.
    pub(crate) fn cbc_encrypt_lanes(keys: &RoundKeys, lanes: &mut [([u8; 16], &mut [u8])]) {
        assert!(lanes.len() <= MAX_LANES);
        assert!(lanes.iter().all(|(_, d)| d.len().is_multiple_of(16)));
        // Phases: all running lanes are at the same block; each phase runs them together until
        // the shortest one ends, then drops the lanes that ended.
        let mut pos = 0usize;
        loop {
            let running: Vec<usize> = (0..lanes.len())
                .filter(|&j| lanes[j].1.len() / 16 > pos)
                .collect();
            let Some(steps) = running.iter().map(|&j| lanes[j].1.len() / 16 - pos).min() else {
                break;
            };
            let mut chains = [[0u8; 16]; MAX_LANES];
            let mut slices: Vec<&mut [u8]> = Vec::with_capacity(running.len());
            {
                let mut taken: Vec<Option<&mut ([u8; 16], &mut [u8])>> =
                    lanes.iter_mut().map(Some).collect();
                for (s, &j) in running.iter().enumerate() {
                    let lane = taken[j].take().expect("each lane once");
                    chains[s] = lane.0;
                    slices.push(&mut lane.1[pos * 16..(pos + steps) * 16]);
                }
                // SAFETY: as in `ecb_encrypt`.
                by_rounds!(keys, NR => unsafe {
                    match running.len().div_ceil(4) {
                        1 => cbc_phase::<NR, 1>(keys, &mut chains, &mut slices, steps),
                        2 => cbc_phase::<NR, 2>(keys, &mut chains, &mut slices, steps),
                        3 => cbc_phase::<NR, 3>(keys, &mut chains, &mut slices, steps),
                        _ => cbc_phase::<NR, 4>(keys, &mut chains, &mut slices, steps),
                    }
                });
            }
            for (s, &j) in running.iter().enumerate() {
                lanes[j].0 = chains[s];
            }
            chains.zeroize();
            pos += steps;
        }
    }

    /// `steps` blocks of CBC on each of `slices` (each exactly `steps` blocks long, at most
    /// `4 * Z` of them), chaining values in `chains` (updated).
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn cbc_phase<const NR: usize, const Z: usize>(
        keys: &RoundKeys,
        chains: &mut [[u8; 16]; MAX_LANES],
        slices: &mut [&mut [u8]],
        steps: usize,
    ) {
        assert!(slices.len() <= 4 * Z && slices.iter().all(|s| s.len() == steps * 16));
        let rk = broadcast(&keys.enc);
        // Lanes beyond `slices.len()` read and write a scratch block (stride 0).
        let mut scratch = [0u8; 16];
        let mut ptr = [scratch.as_mut_ptr(); 16];
        let mut stride = [0usize; 16];
        for (s, slice) in slices.iter_mut().enumerate() {
            ptr[s] = slice.as_mut_ptr();
            stride[s] = 16;
        }
        let mut chain = [_mm512_setzero_si512(); Z];
        for (z, c) in chain.iter_mut().enumerate() {
            *c = gather(&chains[4 * z..4 * z + 4]);
        }
        for i in 0..steps {
            let mut x = [_mm512_setzero_si512(); Z];
            for (z, v) in x.iter_mut().enumerate() {
                // SAFETY: lane `s` points at `steps` blocks (stride 16) or at the 16-byte
                // scratch block (stride 0); block `i < steps` is inside it.
                let p = |s: usize| unsafe { ptr[s].add(i * stride[s]) };
                let v0 = unsafe { _mm_loadu_si128(p(4 * z).cast()) };
                let v1 = unsafe { _mm_loadu_si128(p(4 * z + 1).cast()) };
                let v2 = unsafe { _mm_loadu_si128(p(4 * z + 2).cast()) };
                let v3 = unsafe { _mm_loadu_si128(p(4 * z + 3).cast()) };
                let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v0), v1);
                let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v2), v3);
                let all = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                *v = _mm512_xor_si512(all, chain[z]);
            }
            encrypt_regs::<NR, Z>(&rk, &mut x);
            for (z, v) in x.iter().enumerate() {
                chain[z] = *v;
                // SAFETY: as for the loads.
                let p = |s: usize| unsafe { ptr[s].add(i * stride[s]) };
                unsafe {
                    _mm_storeu_si128(p(4 * z).cast(), _mm512_castsi512_si128(*v));
                    _mm_storeu_si128(p(4 * z + 1).cast(), _mm512_extracti32x4_epi32::<1>(*v));
                    _mm_storeu_si128(p(4 * z + 2).cast(), _mm512_extracti32x4_epi32::<2>(*v));
                    _mm_storeu_si128(p(4 * z + 3).cast(), _mm512_extracti32x4_epi32::<3>(*v));
                }
            }
        }
        for (z, c) in chain.iter().enumerate() {
            scatter(*c, &mut chains[4 * z..4 * z + 4]);
        }
        scratch.zeroize();
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn gather(blocks: &[[u8; 16]]) -> __m512i {
        let v: [__m128i; 4] = std::array::from_fn(|k| load128(&blocks[k]));
        let lo = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v[0]), v[1]);
        let hi = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(v[2]), v[3]);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
    fn scatter(x: __m512i, blocks: &mut [[u8; 16]]) {
        store128(&mut blocks[0], _mm512_castsi512_si128(x));
        store128(&mut blocks[1], _mm512_extracti32x4_epi32::<1>(x));
        store128(&mut blocks[2], _mm512_extracti32x4_epi32::<2>(x));
        store128(&mut blocks[3], _mm512_extracti32x4_epi32::<3>(x));
    }

    // ---------------------------------------------------------------------------------------
    // AES-GCM (NIST SP 800-38D) with 96-bit nonces: CTR from the kernel above, GHASH with
    // carry-less multiplication on byte-reflected blocks (the method of Intel's white paper
    // "Intel Carry-Less Multiplication Instruction and its Usage for Computing the GCM Mode",
    // algorithm 5), sixteen blocks per reduction with the powers H^16..H^1.

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reflect(x: __m128i) -> __m128i {
        _mm_shuffle_epi8(
            x,
            _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        )
    }

    /// The 256-bit carry-less product `hi:lo` of `a` and `b`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn clmul256(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        let lo = _mm_clmulepi64_si128::<0x00>(a, b);
        let hi = _mm_clmulepi64_si128::<0x11>(a, b);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x10>(a, b),
            _mm_clmulepi64_si128::<0x01>(a, b),
        );
        (
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// Shifts the reflected 256-bit product left by one bit and reduces it modulo the GCM
    /// polynomial (linear, so sums of products may be reduced once).
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        let mut t3 = lo;
        let mut t6 = hi;
        let mut t7 = _mm_srli_epi32::<31>(t3);
        let mut t8 = _mm_srli_epi32::<31>(t6);
        t3 = _mm_slli_epi32::<1>(t3);
        t6 = _mm_slli_epi32::<1>(t6);
        let t9 = _mm_srli_si128::<12>(t7);
        t8 = _mm_slli_si128::<4>(t8);
        t7 = _mm_slli_si128::<4>(t7);
        t3 = _mm_or_si128(t3, t7);
        t6 = _mm_or_si128(t6, t8);
        t6 = _mm_or_si128(t6, t9);
        t7 = _mm_slli_epi32::<31>(t3);
        t8 = _mm_slli_epi32::<30>(t3);
        let t9 = _mm_slli_epi32::<25>(t3);
        t7 = _mm_xor_si128(_mm_xor_si128(t7, t8), t9);
        t8 = _mm_srli_si128::<4>(t7);
        t7 = _mm_slli_si128::<12>(t7);
        t3 = _mm_xor_si128(t3, t7);
        let t2 = _mm_srli_epi32::<1>(t3);
        let t4 = _mm_srli_epi32::<2>(t3);
        let t5 = _mm_srli_epi32::<7>(t3);
        let t2 = _mm_xor_si128(_mm_xor_si128(t2, t4), _mm_xor_si128(t5, t8));
        t3 = _mm_xor_si128(t3, t2);
        _mm_xor_si128(t6, t3)
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn gfmul(a: __m128i, b: __m128i) -> __m128i {
        let (lo, hi) = clmul256(a, b);
        reduce(lo, hi)
    }

    /// Fills `keys.h` with H^1..H^16, H = AES_K(0^128), byte-reflected.
    ///
    /// # Safety
    /// The CPU must have the kernels' features (a `RoundKeys` exists).
    #[target_feature(enable = "pclmulqdq,sse4.1,aes")]
    pub(super) unsafe fn gcm_powers(keys: &mut GcmKeys) {
        let mut zero = [0u8; 16];
        super::x86::encrypt_block(&keys.aes, &mut zero);
        let h = reflect(load128(&zero));
        zero.zeroize();
        let mut p = h;
        for slot in keys.h.iter_mut() {
            store128(slot, p);
            p = gfmul(p, h);
        }
    }

    /// Horizontal XOR of the four 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn fold4(x: __m512i) -> __m128i {
        let y = _mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
    }

    /// How far ahead GHASH prefetches: about a memory latency's worth of its steps.
    const PREFETCH: usize = 2048;

    /// The powers of H for a 256-byte GHASH step: register k multiplies blocks 4k..4k+3 of
    /// the 16 by H^(16-4k)..H^(13-4k).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn step_powers(keys: &GcmKeys) -> [__m512i; 4] {
        let mut hp = [_mm512_setzero_si512(); 4];
        for (k, v) in hp.iter_mut().enumerate() {
            let lanes: [[u8; 16]; 4] = std::array::from_fn(|l| keys.h[15 - 4 * k - l]);
            *v = gather(&lanes);
        }
        hp
    }

    /// GHASH state `y` (reflected) after the 16 blocks of `blocks` (as stored, not reflected):
    /// one reduction for all sixteen products.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn ghash_step(hp: &[__m512i; 4], y: __m128i, blocks: &[__m512i; 4]) -> __m128i {
        let swap = _mm512_broadcast_i32x4(_mm_set_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
        ));
        let mut lo = _mm512_setzero_si512();
        let mut hi = _mm512_setzero_si512();
        let mut mid = _mm512_setzero_si512();
        for (k, (h, b)) in hp.iter().zip(blocks).enumerate() {
            let mut x = _mm512_shuffle_epi8(*b, swap);
            if k == 0 {
                x = _mm512_xor_si512(x, _mm512_zextsi128_si512(y));
            }
            lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128::<0x00>(x, *h));
            hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128::<0x11>(x, *h));
            mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128::<0x10>(x, *h));
            mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128::<0x01>(x, *h));
        }
        let (l, h, m) = (fold4(lo), fold4(hi), fold4(mid));
        reduce(
            _mm_xor_si128(l, _mm_slli_si128::<8>(m)),
            _mm_xor_si128(h, _mm_srli_si128::<8>(m)),
        )
    }

    /// Asks for the four cache lines `PREFETCH` bytes past `at` in `data`: a record read from
    /// the page cache is first touched by GHASH, and the hardware prefetchers stop at 4 KiB
    /// pages, so the lines' memory latency is overlapped by asking ahead.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn prefetch_ahead(data: &[u8], at: usize) {
        let ahead = data.as_ptr().wrapping_add(at + PREFETCH);
        for line in 0..4 {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line) as *const i8);
        }
    }

    /// GHASH state `y` (reflected) updated with `data` (zero-padded to whole blocks).
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn ghash(keys: &GcmKeys, mut y: __m128i, data: &[u8]) -> __m128i {
        let hp = step_powers(keys);
        let h1 = load128(&keys.h[0]);
        let mut at = 0;
        while at + 256 <= data.len() {
            prefetch_ahead(data, at);
            let blocks: [__m512i; 4] = std::array::from_fn(|k| load512(data, at + 64 * k));
            y = ghash_step(&hp, y, &blocks);
            at += 256;
        }
        for block in data[at..].chunks(16) {
            let mut padded = [0u8; 16];
            padded[..block.len()].copy_from_slice(block);
            y = gfmul(_mm_xor_si128(y, reflect(load128(&padded))), h1);
            padded.zeroize();
        }
        y
    }

    /// GCM decryption's whole 256-byte steps of `src` into `dst`, stitched: each step's
    /// ciphertext is hashed into `y` and XORed with the keystream of its 16 counter blocks
    /// (from `counter`, whose low word does not wrap) in the same loop, so that the AES rounds
    /// overlap GHASH's multiplications and the loads' latency. Returns the bytes done.
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn gcm_decrypt_steps<const NR: usize>(
        keys: &GcmKeys,
        y: &mut [u8; 16],
        counter: &[u8; 16],
        src: &[u8],
        dst: &mut [u8],
    ) -> usize {
        let rk = broadcast(&keys.aes.enc);
        let hp = step_powers(keys);
        let (mut ctr, swap, four) = counter_lanes(counter);
        let mut acc = load128(y);
        let mut at = 0;
        while at + 256 <= src.len() {
            prefetch_ahead(src, at);
            let mut x = [_mm512_setzero_si512(); 4];
            for v in x.iter_mut() {
                *v = _mm512_shuffle_epi8(ctr, swap);
                ctr = _mm512_add_epi32(ctr, four);
            }
            encrypt_regs::<NR, 4>(&rk, &mut x);
            let blocks: [__m512i; 4] = std::array::from_fn(|k| load512(src, at + 64 * k));
            acc = ghash_step(&hp, acc, &blocks);
            for (k, (b, v)) in blocks.iter().zip(&x).enumerate() {
                store512(dst, at + 64 * k, _mm512_xor_si512(*b, *v));
            }
            at += 256;
        }
        store128(y, acc);
        at
    }

    /// Bytes per step of the fused GCM loop: CTR and GHASH on the same chunk while it is in
    /// the L1 cache (a multiple of the 256-byte GHASH stride, so chunks are whole blocks).
    const GCM_CHUNK: usize = 16 << 10;

    /// GCM over `data` in place, CTR and GHASH chunk by chunk (GHASH before CTR when
    /// decrypting, after when encrypting, so it always hashes the ciphertext); returns the
    /// tag computed over `aad` and the ciphertext.
    fn gcm_fused(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        decrypt: bool,
    ) -> [u8; 16] {
        // The 32-bit counter starts at 2 and cannot wrap within GCM_MAX, so the 128-bit
        // counter of `ctr_apply` gives the same blocks as GCM's inc32.
        let mut counter = u128::from_be_bytes(gcm_counter(nonce));
        let mut y = [0u8; 16];
        // SAFETY (every `ghash_into` call): a `GcmKeys` holds a `RoundKeys`, which exists
        // only when `supported()` found every feature enabled.
        unsafe { ghash_into(keys, &mut y, aad) };
        for chunk in data.chunks_mut(GCM_CHUNK) {
            if decrypt {
                unsafe { ghash_into(keys, &mut y, chunk) };
            }
            ctr_apply(&keys.aes, &counter.to_be_bytes(), chunk);
            if !decrypt {
                unsafe { ghash_into(keys, &mut y, chunk) };
            }
            counter = counter.wrapping_add((chunk.len() / 16) as u128);
        }
        gcm_tag(keys, &mut y, nonce, aad.len(), data.len())
    }

    /// The tag from the GHASH state `y` after the AAD and the ciphertext (`aad_len` and
    /// `len` bytes): the lengths block hashed in, then E(J0) ^ GHASH. `y` is wiped.
    fn gcm_tag(
        keys: &GcmKeys,
        y: &mut [u8; 16],
        nonce: &[u8; 12],
        aad_len: usize,
        len: usize,
    ) -> [u8; 16] {
        let mut lengths = [0u8; 16];
        lengths[..8].copy_from_slice(&(aad_len as u64 * 8).to_be_bytes());
        lengths[8..].copy_from_slice(&(len as u64 * 8).to_be_bytes());
        // SAFETY (both calls): a `GcmKeys` holds a `RoundKeys`, which exists only when
        // `supported()` found every feature enabled.
        unsafe { ghash_into(keys, y, &lengths) };
        // `y` is kept reflected between calls.
        let mut s = [0u8; 16];
        unsafe { unreflect(y, &mut s) };
        y.zeroize();
        let mut j0 = [0u8; 16];
        j0[..12].copy_from_slice(nonce);
        j0[15] = 1;
        super::x86::encrypt_block(&keys.aes, &mut j0);
        for (t, e) in s.iter_mut().zip(j0) {
            *t ^= e;
        }
        s
    }

    /// AES-GCM decryption from `src` into `dst` (same length, at most [`GCM_MAX`] bytes:
    /// both checked by the caller, `crate::aes::Gcm::decrypt_to`, which also wipes `dst` when
    /// the tag does not match), whole 256-byte steps stitched ([`gcm_decrypt_steps`]), the
    /// rest hashed then run through CTR. Whether the tag over `aad` and `src` equals `tag`
    /// (compared in constant time).
    pub(crate) fn gcm_decrypt_to(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        src: &[u8],
        dst: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        let mut counter = u128::from_be_bytes(gcm_counter(nonce));
        let mut y = [0u8; 16];
        // SAFETY (every `ghash_into` call): a `GcmKeys` holds a `RoundKeys`, which exists
        // only when `supported()` found every feature enabled.
        unsafe { ghash_into(keys, &mut y, aad) };
        // Whole steps stitched; the last partial step hashed, then run through CTR.
        // SAFETY: as above.
        let done = by_rounds!(&keys.aes, NR => unsafe {
            gcm_decrypt_steps::<NR>(keys, &mut y, &counter.to_be_bytes(), src, dst)
        });
        counter = counter.wrapping_add((done / 16) as u128);
        unsafe { ghash_into(keys, &mut y, &src[done..]) };
        ctr_apply_to(
            &keys.aes,
            &counter.to_be_bytes(),
            &src[done..],
            &mut dst[done..],
        );
        let expected = gcm_tag(keys, &mut y, nonce, aad.len(), src.len());
        crate::aes::tags_equal(&expected, tag)
    }

    /// GHASH state `y` (reflected bytes) updated with `data`, zero-padded to whole blocks.
    #[target_feature(enable = "avx512f,avx512bw,vaes,vpclmulqdq,pclmulqdq,aes")]
    fn ghash_into(keys: &GcmKeys, y: &mut [u8; 16], data: &[u8]) {
        let out = ghash(keys, load128(y), data);
        store128(y, out);
    }

    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn unreflect(y: &[u8; 16], out: &mut [u8; 16]) {
        store128(out, reflect(load128(y)));
    }

    /// The first counter block for the data: nonce || 2.
    fn gcm_counter(nonce: &[u8; 12]) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..12].copy_from_slice(nonce);
        c[15] = 2;
        c
    }

    /// AES-GCM encryption in place; returns the tag. `data` is at most [`GCM_MAX`] bytes
    /// (checked by the caller).
    pub(crate) fn gcm_encrypt(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
    ) -> [u8; 16] {
        assert!(data.len() as u64 <= GCM_MAX);
        gcm_fused(keys, nonce, aad, data, false)
    }

    /// AES-GCM decryption in place: returns whether the tag matches. The data is decrypted
    /// chunk by chunk as it is hashed; when the tag does not match it is encrypted back, so a
    /// refused message is left as it was.
    pub(crate) fn gcm_decrypt(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        if data.len() as u64 > GCM_MAX {
            return false;
        }
        let expected = gcm_fused(keys, nonce, aad, data, true);
        if !crate::aes::tags_equal(&expected, tag) {
            ctr_apply(&keys.aes, &gcm_counter(nonce), data);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// FIPS-197 Appendix A: key expansion examples for AES-128, AES-192 and AES-256 (first and
    /// last round keys, and the first expanded words).
    #[test]
    fn key_expansion_matches_fips_197_appendix_a() {
        if !supported() {
            eprintln!("skipped: no VAES/AVX-512 on this CPU");
            return;
        }
        let cases = [
            (
                "2b7e151628aed2a6abf7158809cf4f3c",
                1,
                "a0fafe1788542cb123a339392a6c7605",
                "d014f9a8c9ee2589e13f0cc8b6630ca6",
            ),
            (
                "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
                1,
                "62f8ead2522c6b7bfe0c91f72402f5a5",
                "e98ba06f448c773c8ecc720401002202",
            ),
            (
                "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
                2,
                "9ba354118e6925afa51a8b5f2067fcde",
                "fe4890d1e6188d0b046df344706c631e",
            ),
        ];
        for (key, r, round_r, last) in cases {
            let keys = RoundKeys::new(&hex(key)).unwrap();
            let rk = keys.encryption_keys();
            assert_eq!(rk.len(), hex(key).len() / 4 + 7);
            assert_eq!(rk[0].to_vec(), hex(key)[..16].to_vec(), "{key}");
            assert_eq!(rk[r].to_vec(), hex(round_r), "{key} round {r}");
            assert_eq!(rk[rk.len() - 1].to_vec(), hex(last), "{key} last round");
        }
    }

    #[test]
    fn wrong_key_lengths_are_refused() {
        for len in [0, 8, 15, 17, 31, 33] {
            assert!(RoundKeys::new(&vec![0u8; len]).is_none());
        }
    }
}
