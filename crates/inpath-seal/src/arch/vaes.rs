//! Hand-written AES kernels for x86-64 CPUs with VAES and AVX-512 (Ice Lake and later, Zen 4
//! and later): ECB, CTR, CBC decryption and CFB decryption four blocks per instruction with
//! eight 512-bit registers in flight; CBC encryption of up to 16 independent pages side by side
//! (each 128-bit lane of a register is a different page, so the chain latency is hidden); and
//! AES-GCM with GHASH on VPCLMULQDQ, sixteen blocks per reduction. The inherently sequential
//! modes (CFB encryption, OFB, one CBC chain) are the one-block AES-NI loops of `common`.
//!
//! A leaf: it imports only `common` (the key schedule, the GHASH reduction, the CTR split, the
//! CBC lane phases); the dispatcher (`arch`) decides when it runs.
//!
//! # Why this module has `unsafe`
//!
//! RustCrypto's `aes` crate (the library path, used when these instructions are missing)
//! encrypts calls of fewer than 64 blocks one block at a time and prepares its round keys on
//! every call, which made CTR, multi-page CBC and CFB decryption several times slower than the
//! AES units allow (`bench/seal.py`). The intrinsics need `#[target_feature]` functions, which
//! are `unsafe` to call, and raw-pointer loads and stores. Every call into a
//! `#[target_feature]` function here is made only through a [`Keys`], which can only be built
//! after a run-time check that the CPU has every feature the kernels enable; every pointer
//! access stays inside the slice it comes from (lengths are checked or masked, see each
//! function).
#![allow(unsafe_code)]

use super::common::{
    self, by_rounds, gcm_counter, gfmul, load128, reduce3, reflect, store128, RoundKeys, GCM_MAX,
    MAX_LANES,
};
use std::arch::x86_64::*;
use zeroize::Zeroize;

/// Round keys ([`RoundKeys`]) for these kernels. Wiped on drop. Holding one proves the CPU has
/// the kernels' features ([`supported`]).
#[derive(Clone)]
pub(crate) struct Keys(RoundKeys);

impl std::ops::Deref for Keys {
    type Target = RoundKeys;
    fn deref(&self) -> &RoundKeys {
        &self.0
    }
}

impl AsRef<RoundKeys> for Keys {
    fn as_ref(&self) -> &RoundKeys {
        &self.0
    }
}

impl Keys {
    /// Expands a 16-, 24- or 32-byte key, or `None` when the CPU lacks the kernels' features
    /// (or the key length is wrong).
    pub(crate) fn new(key: &[u8]) -> Option<Keys> {
        if !supported() {
            return None;
        }
        RoundKeys::new(key).map(Keys)
    }
}

/// AES-GCM keys for these kernels: [`Keys`] and the powers `H^1..H^16` of the hash key.
pub(crate) type GcmKeys = common::GcmKeys<Keys>;

/// Whether the CPU has what the kernels need.
pub(crate) fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        common::aes_ni()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
    })
}

/// Blocks per main-loop iteration of the parallel modes: 8 registers of 4 blocks.
const WIDE: usize = 32;

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

// ---------------------------------------------------------------------------------------
// ECB.

/// ECB encryption of whole blocks in place.
pub(crate) fn ecb_encrypt(keys: &Keys, data: &mut [u8]) {
    assert!(data.len().is_multiple_of(16), "whole blocks");
    // SAFETY: a `Keys` exists only when `supported()` found every feature enabled.
    by_rounds!(keys, NR => unsafe { ecb::<NR, false>(keys, data) })
}

/// ECB decryption of whole blocks in place.
pub(crate) fn ecb_decrypt(keys: &Keys, data: &mut [u8]) {
    assert!(data.len().is_multiple_of(16), "whole blocks");
    // SAFETY: as in `ecb_encrypt`.
    by_rounds!(keys, NR => unsafe { ecb::<NR, true>(keys, data) })
}

#[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
fn ecb<const NR: usize, const DECRYPT: bool>(keys: &Keys, data: &mut [u8]) {
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
pub(crate) fn ctr_apply(keys: &Keys, iv: &[u8; 16], data: &mut [u8]) {
    common::ctr_segments(iv, data.len(), |counter, range| {
        // SAFETY: as in `ecb_encrypt`.
        by_rounds!(keys, NR => unsafe {
            ctr32::<NR, false>(keys, counter, &[], &mut data[range])
        })
    });
}

/// As [`ctr_apply`], reading `src` and writing `dst` (of the same length).
pub(crate) fn ctr_apply_to(keys: &Keys, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len());
    common::ctr_segments(iv, src.len(), |counter, range| {
        // SAFETY: as in `ecb_encrypt`.
        by_rounds!(keys, NR => unsafe {
            ctr32::<NR, true>(keys, counter, &src[range.clone()], &mut dst[range])
        })
    });
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
    keys: &Keys,
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
pub(crate) fn cbc_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: as in `ecb_encrypt`.
    common::chained_decrypt(
        iv,
        data,
        |iv, data| by_rounds!(keys, NR => unsafe { chained::<NR, true>(keys, iv, data) }),
    );
}

/// CFB-128 decryption of whole blocks in place; `iv` becomes the last ciphertext block.
pub(crate) fn cfb_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: as in `ecb_encrypt`.
    common::chained_decrypt(
        iv,
        data,
        |iv, data| by_rounds!(keys, NR => unsafe { chained::<NR, false>(keys, iv, data) }),
    );
}

#[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
fn chained<const NR: usize, const CBC: bool>(keys: &Keys, iv: &[u8; 16], data: &mut [u8]) {
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
// CBC encryption across pages: each 128-bit lane of a register is a page.

/// CBC-encrypts up to [`MAX_LANES`] independent pages in place, side by side. Each lane is
/// `(iv, data)` with `data` whole blocks; lanes may differ in length. Each `iv` becomes
/// the lane's last ciphertext block.
pub(crate) fn cbc_encrypt_lanes(keys: &Keys, lanes: &mut [([u8; 16], &mut [u8])]) {
    common::cbc_phases(lanes, |chains, slices, steps| {
        // SAFETY: as in `ecb_encrypt`.
        by_rounds!(keys, NR => unsafe {
            match slices.len().div_ceil(4) {
                1 => cbc_phase::<NR, 1>(keys, chains, slices, steps),
                2 => cbc_phase::<NR, 2>(keys, chains, slices, steps),
                3 => cbc_phase::<NR, 3>(keys, chains, slices, steps),
                _ => cbc_phase::<NR, 4>(keys, chains, slices, steps),
            }
        })
    });
}

/// `steps` blocks of CBC on each of `slices` (each exactly `steps` blocks long, at most
/// `4 * Z` of them), chaining values in `chains` (updated).
#[target_feature(enable = "avx512f,avx512bw,vaes,aes")]
fn cbc_phase<const NR: usize, const Z: usize>(
    keys: &Keys,
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
    reduce3(fold4(lo), fold4(hi), fold4(mid))
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
    // SAFETY (every `ghash_into` call): a `GcmKeys` holds a `Keys`, which exists
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
    // SAFETY (both calls): a `GcmKeys` holds a `Keys`, which exists only when
    // `supported()` found every feature enabled.
    unsafe { ghash_into(keys, y, &lengths) };
    // `y` is kept reflected between calls.
    let mut s = [0u8; 16];
    unsafe { unreflect(y, &mut s) };
    y.zeroize();
    let mut j0 = [0u8; 16];
    j0[..12].copy_from_slice(nonce);
    j0[15] = 1;
    common::encrypt_block(&keys.aes, &mut j0);
    for (t, e) in s.iter_mut().zip(j0) {
        *t ^= e;
    }
    s
}

/// AES-GCM decryption from `src` into `dst` (same length, at most [`GCM_MAX`] bytes),
/// whole 256-byte steps stitched ([`gcm_decrypt_steps`]), the rest hashed then run through
/// CTR. Returns the tag computed over `aad` and `src`.
pub(crate) fn gcm_decrypt_to(
    keys: &GcmKeys,
    nonce: &[u8; 12],
    aad: &[u8],
    src: &[u8],
    dst: &mut [u8],
) -> [u8; 16] {
    assert!(src.len() == dst.len() && src.len() as u64 <= GCM_MAX);
    let mut counter = u128::from_be_bytes(gcm_counter(nonce));
    let mut y = [0u8; 16];
    // SAFETY (every `ghash_into` call): a `GcmKeys` holds a `Keys`, which exists
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
    gcm_tag(keys, &mut y, nonce, aad.len(), src.len())
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

/// AES-GCM decryption in place, chunk by chunk as it is hashed; returns the tag computed over
/// `aad` and the ciphertext. `data` is at most [`GCM_MAX`] bytes.
pub(crate) fn gcm_decrypt(
    keys: &GcmKeys,
    nonce: &[u8; 12],
    aad: &[u8],
    data: &mut [u8],
) -> [u8; 16] {
    assert!(data.len() as u64 <= GCM_MAX);
    gcm_fused(keys, nonce, aad, data, true)
}
