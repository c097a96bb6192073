//! What the vector kernels share, written once: the round keys and their constant-time key
//! schedule, the GCM hash-key powers and the GHASH reduction, the one-block loops of the
//! sequential modes (CBC encryption of one chain, CFB encryption, OFB, single blocks), the
//! CTR counter split, the CBC lane phases, and the GCM constants and tag check.
//!
//! A leaf: it imports nothing from the crate, and `ni`, `vaes` and the dispatcher (`arch`)
//! import it.
//!
//! # Why this module has `unsafe`
//!
//! The intrinsics need `#[target_feature]` functions, which are `unsafe` to call, and 128-bit
//! unaligned loads and stores through pointers. A [`RoundKeys`] can only be built after a
//! run-time check that the CPU has AES-NI, SSE4.1 and PCLMULQDQ (every kernel needs them), so
//! the safe functions here that take one may call the `#[target_feature]` functions that need
//! no more. Every pointer access is a 16-byte array.
#![allow(unsafe_code)]
// Off x86-64 no kernel exists, so most of this is never called there.
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unused_imports, unused_macros, unused_mut)
)]

use zeroize::Zeroize;

/// Largest GCM plaintext: 2^32 - 2 blocks (NIST SP 800-38D, 2^39 - 256 bits).
pub(crate) const GCM_MAX: u64 = ((1u64 << 32) - 2) * 16;

/// Most pages a vector kernel's CBC encryption runs side by side (one per 128-bit lane).
pub(crate) const MAX_LANES: usize = 16;

/// Whether a computed GCM tag equals the stored one, compared in constant time over the 16
/// bytes (every kernel's check).
pub(crate) fn tags_equal(computed: &[u8; 16], stored: &[u8; 16]) -> bool {
    let diff = computed
        .iter()
        .zip(stored)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

/// The first counter block for GCM's data: nonce || 2.
pub(crate) fn gcm_counter(nonce: &[u8; 12]) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..12].copy_from_slice(nonce);
    c[15] = 2;
    c
}

/// Whether the CPU has what every kernel needs: AES-NI, SSE4.1 and PCLMULQDQ (the key
/// schedule, the one-block loops and the hash-key powers).
pub(crate) fn aes_ni() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("sse4.1")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Expanded round keys: encryption, and the equivalent inverse cipher's decryption keys.
/// Wiped on drop. Holding one proves the CPU has AES-NI, SSE4.1 and PCLMULQDQ ([`aes_ni`]).
#[derive(Clone)]
pub(crate) struct RoundKeys {
    pub(crate) rounds: usize,
    pub(crate) enc: [[u8; 16]; 15],
    pub(crate) dec: [[u8; 16]; 15],
}

impl Drop for RoundKeys {
    fn drop(&mut self) {
        self.enc.zeroize();
        self.dec.zeroize();
    }
}

impl RoundKeys {
    /// Expands a 16-, 24- or 32-byte key, or `None` when the CPU lacks AES-NI (or the key
    /// length is wrong).
    pub(crate) fn new(key: &[u8]) -> Option<RoundKeys> {
        if !aes_ni() || !matches!(key.len(), 16 | 24 | 32) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut keys = RoundKeys {
                rounds: 0,
                enc: [[0u8; 16]; 15],
                dec: [[0u8; 16]; 15],
            };
            // SAFETY: `aes_ni()` checked AES-NI and SSE4.1 at run time.
            keys.rounds = unsafe { x86::expand_into(key, &mut keys.enc, &mut keys.dec) };
            Some(keys)
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

/// AES-GCM keys over a kernel's round keys `K`: those and the powers `H^1..H^16` of the hash
/// key (byte-reflected, as the carry-less multiplication works on them). Wiped on drop.
#[derive(Clone)]
pub(crate) struct GcmKeys<K> {
    pub(crate) aes: K,
    pub(crate) h: [[u8; 16]; 16],
}

impl<K> Drop for GcmKeys<K> {
    fn drop(&mut self) {
        self.h.zeroize();
    }
}

impl<K: AsRef<RoundKeys>> GcmKeys<K> {
    /// GCM keys over `aes` (any key size).
    pub(crate) fn new(aes: K) -> GcmKeys<K> {
        let mut h = [[0u8; 16]; 16];
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `RoundKeys` exists only when the CPU has AES-NI, SSE4.1 and PCLMULQDQ.
        unsafe {
            x86::hash_powers(aes.as_ref(), &mut h)
        };
        GcmKeys { aes, h }
    }
}

/// Runs `$body` with the const `$nr` set to the number of rounds of `$keys`.
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
pub(crate) use by_rounds;

/// Splits `len` bytes of CTR where the low 32-bit word of the counter wraps (the kernels add
/// to that word only) and calls `run(first counter block, byte range)` for each piece,
/// carrying into the upper 96 bits here.
pub(crate) fn ctr_segments(
    iv: &[u8; 16],
    len: usize,
    mut run: impl FnMut(&[u8; 16], std::ops::Range<usize>),
) {
    let mut counter = u128::from_be_bytes(*iv);
    let mut at = 0;
    while at < len {
        let room = (1u64 << 32) - u64::from(counter as u32); // blocks before the wrap
        let take = ((len - at) as u64).min(room * 16) as usize;
        run(&counter.to_be_bytes(), at..at + take);
        counter = counter.wrapping_add(u128::from(room));
        at += take;
    }
}

/// A parallel chained decryption (CBC or CFB) of whole blocks: `run(iv, data)` decrypts in
/// place, then `iv` becomes the last ciphertext block.
pub(crate) fn chained_decrypt(
    iv: &mut [u8; 16],
    data: &mut [u8],
    run: impl FnOnce(&[u8; 16], &mut [u8]),
) {
    assert!(data.len().is_multiple_of(16), "whole blocks");
    if data.is_empty() {
        return;
    }
    let last: [u8; 16] = data[data.len() - 16..].try_into().expect("16 bytes");
    run(iv, data);
    *iv = last;
}

/// CBC encryption of independent pages side by side (`lanes`: at most [`MAX_LANES`], each
/// `(iv, data)` with `data` whole blocks, of any lengths), in phases: all running lanes are at
/// the same block; each phase runs them together until the shortest one ends, then drops the
/// lanes that ended. `phase(chains, slices, steps)` runs `steps` blocks of CBC on each of
/// `slices` (each exactly `steps` blocks) from the chaining values `chains` (updated; lane `s`
/// of the phase is `chains[s]`). Each `iv` becomes its lane's last ciphertext block.
pub(crate) fn cbc_phases(
    lanes: &mut [([u8; 16], &mut [u8])],
    mut phase: impl FnMut(&mut [[u8; 16]; MAX_LANES], &mut [&mut [u8]], usize),
) {
    assert!(lanes.len() <= MAX_LANES);
    assert!(lanes.iter().all(|(_, d)| d.len().is_multiple_of(16)));
    let mut pos = 0usize;
    loop {
        let running: Vec<usize> = (0..lanes.len())
            .filter(|&j| lanes[j].1.len() / 16 > pos)
            .collect();
        let Some(steps) = running.iter().map(|&j| lanes[j].1.len() / 16 - pos).min() else {
            break;
        };
        let mut chains = [[0u8; 16]; MAX_LANES];
        {
            let mut slices: Vec<&mut [u8]> = Vec::with_capacity(running.len());
            let mut taken: Vec<Option<&mut ([u8; 16], &mut [u8])>> =
                lanes.iter_mut().map(Some).collect();
            for (s, &j) in running.iter().enumerate() {
                let lane = taken[j].take().expect("each lane once");
                chains[s] = lane.0;
                slices.push(&mut lane.1[pos * 16..(pos + steps) * 16]);
            }
            phase(&mut chains, &mut slices, steps);
        }
        for (s, &j) in running.iter().enumerate() {
            lanes[j].0 = chains[s];
        }
        chains.zeroize();
        pos += steps;
    }
}

// ---------------------------------------------------------------------------------------------
// The sequential modes, one AES-NI block at a time for every kernel: the chain allows nothing
// else, whatever the vector width.

/// Chained-mode selectors for [`chain`].
pub(crate) const CFB: u8 = 0;
/// Output feedback.
pub(crate) const OFB: u8 = 1;
/// CBC encryption.
pub(crate) const CBC: u8 = 2;

/// Encrypts one block in place.
pub(crate) fn encrypt_block(keys: &RoundKeys, block: &mut [u8; 16]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a `RoundKeys` proves AES-NI and SSE4.1.
    by_rounds!(keys, NR => unsafe { x86::encrypt_one::<NR>(&keys.enc, block) });
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no RoundKeys off x86-64 ({keys:p}, {block:p})")
}

/// A chained mode (`CFB` or `CBC` encryption, `OFB`) over whole blocks in place; `iv` becomes
/// the last ciphertext (CFB, CBC) or keystream (OFB) block.
pub(crate) fn chain<const MODE: u8>(keys: &RoundKeys, iv: &mut [u8; 16], data: &mut [u8]) {
    assert!(data.len().is_multiple_of(16), "whole blocks");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `encrypt_block`.
    by_rounds!(keys, NR => unsafe { x86::sequential::<NR, MODE>(&keys.enc, iv, data) });
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no RoundKeys off x86-64 ({keys:p}, {iv:p}, {data:p})")
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{gfmul, load128, reduce3, reflect, store128};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{RoundKeys, CBC, CFB};
    use std::arch::x86_64::*;
    use zeroize::Zeroize;

    // -----------------------------------------------------------------------------------------
    // Key expansion (FIPS-197 §5.2), SubWord by AESENCLAST (no key-indexed tables).

    #[target_feature(enable = "aes,sse4.1")]
    fn sub_word(w: u32) -> u32 {
        // With all four columns equal, ShiftRows is the identity, so AESENCLAST with a zero
        // round key is SubBytes on each byte.
        let x = _mm_set1_epi32(w as i32);
        let y = _mm_aesenclast_si128(x, _mm_setzero_si128());
        _mm_cvtsi128_si32(y) as u32
    }

    /// The AES key schedule of `key` (16, 24 or 32 bytes, checked by the caller) written into
    /// the caller's (wiped-on-drop) tables: `enc` for encryption and `dec` for the equivalent
    /// inverse cipher (FIPS-197 §5.3.5). Returns the number of rounds.
    ///
    /// # Safety
    /// The CPU must have AES-NI and SSE4.1.
    #[target_feature(enable = "aes,sse4.1")]
    pub(super) unsafe fn expand_into(
        key: &[u8],
        enc: &mut [[u8; 16]; 15],
        dec: &mut [[u8; 16]; 15],
    ) -> usize {
        let nk = key.len() / 4;
        let rounds = nk + 6;
        let total = 4 * (rounds + 1);
        let mut w = [0u32; 60];
        for (i, word) in key.chunks_exact(4).enumerate() {
            w[i] = u32::from_le_bytes(word.try_into().expect("4 bytes"));
        }
        let mut rcon = 1u32;
        for i in nk..total {
            let mut t = w[i - 1];
            if i % nk == 0 {
                // RotWord on a little-endian word is a right rotation by one byte.
                t = sub_word(t.rotate_right(8)) ^ rcon;
                rcon = (rcon << 1) ^ if rcon & 0x80 != 0 { 0x11b } else { 0 };
            } else if nk > 6 && i % nk == 4 {
                t = sub_word(t);
            }
            w[i] = w[i - nk] ^ t;
        }
        for r in 0..=rounds {
            for c in 0..4 {
                enc[r][4 * c..4 * c + 4].copy_from_slice(&w[4 * r + c].to_le_bytes());
            }
        }
        w.zeroize();
        // The equivalent inverse cipher: reversed keys, InvMixColumns on the middle ones.
        dec[0] = enc[rounds];
        dec[rounds] = enc[0];
        for r in 1..rounds {
            let k = load128(&enc[rounds - r]);
            store128(&mut dec[r], _mm_aesimc_si128(k));
        }
        rounds
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub(crate) fn load128(bytes: &[u8; 16]) -> __m128i {
        // SAFETY: 16 readable bytes.
        unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub(crate) fn store128(bytes: &mut [u8; 16], x: __m128i) {
        // SAFETY: 16 writable bytes.
        unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), x) }
    }

    // -----------------------------------------------------------------------------------------
    // GF(2^128) arithmetic on byte-reflected blocks (Intel's carry-less multiplication white
    // paper, "Intel Carry-Less Multiplication Instruction and its Usage for Computing the GCM
    // Mode", algorithm 5), shared by every kernel.

    /// The bytes of a block reversed (GHASH works on reflected blocks).
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub(crate) fn reflect(x: __m128i) -> __m128i {
        _mm_shuffle_epi8(
            x,
            _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        )
    }

    /// Shifts the reflected 256-bit product `hi:lo` left by one bit and reduces it modulo the
    /// GCM polynomial (linear, so sums of products may be reduced once).
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

    /// The reduced product from its three accumulated partial products: low and high halves
    /// and the (already combined) middle term.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub(crate) fn reduce3(lo: __m128i, hi: __m128i, mid: __m128i) -> __m128i {
        reduce(
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// `a * b` in GF(2^128), reflected.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    pub(crate) fn gfmul(a: __m128i, b: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(a, b);
        let hi = _mm_clmulepi64_si128::<0x11>(a, b);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x10>(a, b),
            _mm_clmulepi64_si128::<0x01>(a, b),
        );
        reduce3(lo, hi, mid)
    }

    /// Fills `h` with H^1..H^16, H = AES_K(0^128), byte-reflected.
    ///
    /// # Safety
    /// The CPU must have AES-NI, SSE4.1 and PCLMULQDQ (a `RoundKeys` exists).
    #[target_feature(enable = "aes,pclmulqdq,sse4.1")]
    pub(super) unsafe fn hash_powers(keys: &RoundKeys, h: &mut [[u8; 16]; 16]) {
        let mut zero = [0u8; 16];
        super::encrypt_block(keys, &mut zero);
        let h1 = reflect(load128(&zero));
        zero.zeroize();
        let mut p = h1;
        for slot in h.iter_mut() {
            store128(slot, p);
            p = gfmul(p, h1);
        }
    }

    // -----------------------------------------------------------------------------------------
    // One block at a time.

    #[target_feature(enable = "aes,sse4.1")]
    pub(super) fn encrypt_one<const NR: usize>(enc: &[[u8; 16]; 15], block: &mut [u8; 16]) {
        let mut x = _mm_xor_si128(load128(block), load128(&enc[0]));
        for k in &enc[1..NR] {
            x = _mm_aesenc_si128(x, load128(k));
        }
        x = _mm_aesenclast_si128(x, load128(&enc[NR]));
        store128(block, x);
    }

    #[target_feature(enable = "aes,sse4.1")]
    pub(super) fn sequential<const NR: usize, const MODE: u8>(
        enc: &[[u8; 16]; 15],
        iv: &mut [u8; 16],
        data: &mut [u8],
    ) {
        let mut rk = [_mm_setzero_si128(); 15];
        for (r, k) in rk.iter_mut().zip(enc) {
            *r = load128(k);
        }
        // The chain is the latency of the rounds, so keep everything else off it: the loop
        // carries the whitened next input (input ^ rk0), and the last round key has rk0
        // folded in, so AESENCLAST yields E(input) ^ rk0 directly.
        let rk0 = rk[0];
        let last = _mm_xor_si128(rk[NR], rk0);
        let blocks = data.as_chunks_mut::<16>().0;
        let Some(first) = blocks.first() else {
            return;
        };
        let mut state = _mm_xor_si128(load128(iv), rk0);
        if MODE == CBC {
            state = _mm_xor_si128(state, load128(first));
        }
        let n = blocks.len();
        for i in 0..n {
            let mut y = state;
            for k in &rk[1..NR] {
                y = _mm_aesenc_si128(y, *k);
            }
            let z = _mm_aesenclast_si128(y, last); // E(input) ^ rk0
            match MODE {
                CBC => {
                    store128(&mut blocks[i], _mm_xor_si128(z, rk0));
                    state = match blocks.get(i + 1) {
                        Some(next) => _mm_xor_si128(z, load128(next)),
                        None => z,
                    };
                }
                CFB => {
                    state = _mm_xor_si128(z, load128(&blocks[i]));
                    store128(&mut blocks[i], _mm_xor_si128(state, rk0));
                }
                _ => {
                    let ks = _mm_xor_si128(z, rk0);
                    let plain = load128(&blocks[i]);
                    store128(&mut blocks[i], _mm_xor_si128(ks, plain));
                    state = z;
                }
            }
        }
        store128(iv, _mm_xor_si128(state, rk0));
    }
}
