//! Hand-written AES kernels for x86-64 CPUs without AVX-512, in two widths from one source:
//!
//! - `xmm`: AES-NI on 128-bit registers, one block per register, VEX-encoded (every x86-64
//!   CPU with AES-NI and AVX2: Haswell and later, every Zen);
//! - `ymm`: VAES on 256-bit registers, two blocks per register (Zen 3 and later, Alder Lake
//!   and later).
//!
//! Both run ECB (both directions), CTR, CBC decryption and CFB decryption with twelve (`xmm`)
//! or eight (`ymm`) registers in flight; CBC encryption of up to 8 (`xmm`) or 16 (`ymm`)
//! independent pages side by side, one page per 128-bit lane; and AES-GCM with GHASH on
//! PCLMULQDQ (`ymm`: VPCLMULQDQ), Karatsuba-multiplied and aggregated over 12 (16) blocks per
//! reduction with the precomputed powers of H. GCM decryption is stitched: 8 registers of
//! counter blocks go through the AES rounds while the same ciphertext is hashed between the
//! rounds. The sequential
//! modes (CBC encryption of one chain, CFB encryption, OFB, single blocks) run one AES-NI block
//! at a time for both widths: the chain allows nothing else.
//!
//! The kernel bodies are written once in the `kernels!` macro over a dozen width primitives
//! (load, store, XOR, the AES rounds, counter steps, the previous-block shift, carry-less
//! multiplication); each width module supplies its primitives and its `target_feature` list.
//! Which width runs is chosen in one place, [`crate::kernel::aes_kernel`].
//!
//! # Why this module has `unsafe`
//!
//! As in `crate::vaes`: the intrinsics need `#[target_feature]` functions, which are `unsafe`
//! to call, and 128/256-bit unaligned loads and stores through pointers. A [`Keys`] records the
//! width it was built for and can only be built after a run-time check that the CPU has every
//! feature that width's kernels enable; the safe functions at the bottom of this file call only
//! the width module a `Keys` names. Every pointer access is inside a slice whose bounds are
//! asserted just before it (partial registers go through a stack buffer).
//!
//! # Tests
//!
//! `tests/seal/kernels.rs` compares both widths (and every kernel this CPU has) with the
//! RustCrypto crates for all key sizes, lengths 0..=300 bytes and large, unaligned slices,
//! counter wraps, uneven CBC pages, every chunking of the streaming API, and GCM tags and
//! tamper rejection (`tests/seal/page.rs` runs the page layer on every kernel); the key
//! expansion is checked against FIPS-197 Appendix A below.
#![allow(unsafe_code)]

use zeroize::Zeroize;

/// Register width of a kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    /// AES-NI on 128-bit registers.
    Xmm,
    /// VAES on 256-bit registers.
    Ymm,
}

impl Width {
    /// Whether the CPU has every feature this width's kernels enable.
    pub(crate) fn supported(self) -> bool {
        static X: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        static Y: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        match self {
            Width::Xmm => *X.get_or_init(detect_xmm),
            Width::Ymm => *Y.get_or_init(|| detect_xmm() && detect_ymm()),
        }
    }

    /// Pages [`cbc_encrypt_lanes`] runs side by side at this width (8 registers, one page per
    /// 128-bit lane).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
    pub(crate) fn lanes(self) -> usize {
        match self {
            Width::Xmm => 8,
            Width::Ymm => 16,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn detect_xmm() -> bool {
    // AVX/AVX2 for the three-operand VEX encodings and unaligned memory operands (the kernel
    // runs at the AVX2 level anyway).
    std::arch::is_x86_feature_detected!("aes")
        && std::arch::is_x86_feature_detected!("sse4.1")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("avx")
        && std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(target_arch = "x86_64")]
fn detect_ymm() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("vaes")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_xmm() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_ymm() -> bool {
    false
}

/// Expanded round keys (encryption, and the equivalent inverse cipher's decryption keys) for
/// one width. Wiped on drop. Holding one proves the CPU has that width's features.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // read only by the x86-64 kernels
#[derive(Clone)]
pub(crate) struct Keys {
    width: Width,
    rounds: usize,
    enc: [[u8; 16]; 15],
    dec: [[u8; 16]; 15],
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.enc.zeroize();
        self.dec.zeroize();
    }
}

impl Keys {
    /// Expands a 16-, 24- or 32-byte key for `width`, or `None` when the CPU lacks that width's
    /// features (or the key length is wrong).
    pub(crate) fn new(key: &[u8], width: Width) -> Option<Keys> {
        if !width.supported() || !matches!(key.len(), 16 | 24 | 32) {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `width.supported()` checked AES-NI and SSE4.1 (both widths need them).
            Some(unsafe { x86::expand(key, width) })
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }

    /// The width these keys were built for.
    pub(crate) fn width(&self) -> Width {
        self.width
    }

    /// The encryption round keys (`rounds + 1` of them), for the key-expansion tests.
    #[cfg(test)]
    pub(crate) fn encryption_keys(&self) -> &[[u8; 16]] {
        &self.enc[..=self.rounds]
    }
}

/// AES-GCM keys: the block cipher's round keys and the powers `H^1..H^16` of the hash key
/// (byte-reflected). Wiped on drop.
#[derive(Clone)]
pub(crate) struct GcmKeys {
    aes: Keys,
    h: [[u8; 16]; 16],
}

impl Drop for GcmKeys {
    fn drop(&mut self) {
        self.h.zeroize();
    }
}

impl GcmKeys {
    /// The width of the kernels these keys are for.
    pub(crate) fn width(&self) -> Width {
        self.aes.width
    }

    /// GCM keys over `aes` (any key size).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))] // filled by the x86-64 kernels
    pub(crate) fn new(aes: Keys) -> GcmKeys {
        let mut keys = GcmKeys {
            aes,
            h: [[0u8; 16]; 16],
        };
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Keys` exists only when the CPU has AES-NI, SSE4.1 and PCLMULQDQ.
        unsafe {
            x86::gcm_powers(&mut keys)
        };
        keys
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{
    cbc_decrypt, cbc_encrypt, cbc_encrypt_lanes, cfb_decrypt, cfb_encrypt, chain_in, ctr_apply,
    ctr_apply_to, ecb_decrypt, ecb_encrypt, encrypt_block, encrypt_block_in, expand_into,
    gcm_decrypt, gcm_decrypt_to, gcm_encrypt, ofb_apply, RoundTable, CBC, CFB, OFB,
};

#[cfg(not(target_arch = "x86_64"))]
pub(crate) use stubs::*;

/// On other architectures no [`Keys`] is ever built, so these are never reached.
#[cfg(not(target_arch = "x86_64"))]
mod stubs {
    use super::{GcmKeys, Keys};
    const NO: &str = "no ni::Keys on this architecture";
    pub(crate) fn ecb_encrypt(_: &Keys, _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn ecb_decrypt(_: &Keys, _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn ctr_apply(_: &Keys, _: &[u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn ctr_apply_to(_: &Keys, _: &[u8; 16], _: &[u8], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn cbc_decrypt(_: &Keys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn cbc_encrypt(_: &Keys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn cfb_decrypt(_: &Keys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn cfb_encrypt(_: &Keys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn ofb_apply(_: &Keys, _: &mut [u8; 16], _: &mut [u8]) {
        unreachable!("{NO}")
    }
    pub(crate) fn encrypt_block(_: &Keys, _: &mut [u8; 16]) {
        unreachable!("{NO}")
    }
    pub(crate) fn cbc_encrypt_lanes(_: &Keys, _: &mut [([u8; 16], &mut [u8])]) {
        unreachable!("{NO}")
    }
    pub(crate) fn gcm_encrypt(_: &GcmKeys, _: &[u8; 12], _: &[u8], _: &mut [u8]) -> [u8; 16] {
        unreachable!("{NO}")
    }
    pub(crate) fn gcm_decrypt(
        _: &GcmKeys,
        _: &[u8; 12],
        _: &[u8],
        _: &mut [u8],
        _: &[u8; 16],
    ) -> bool {
        unreachable!("{NO}")
    }
    pub(crate) fn gcm_decrypt_to(
        _: &GcmKeys,
        _: &[u8; 12],
        _: &[u8],
        _: &[u8],
        _: &mut [u8],
        _: &[u8; 16],
    ) -> bool {
        unreachable!("{NO}")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{GcmKeys, Keys, Width};
    use std::arch::x86_64::*;
    use zeroize::Zeroize;

    // ---------------------------------------------------------------------------------------
    // Key expansion (FIPS-197 §5.2), SubWord by AESENCLAST (no key-indexed tables).

    #[target_feature(enable = "aes,sse4.1")]
    fn sub_word(w: u32) -> u32 {
        // With all four columns equal, ShiftRows is the identity, so AESENCLAST with a zero
        // round key is SubBytes on each byte.
        let x = _mm_set1_epi32(w as i32);
        let y = _mm_aesenclast_si128(x, _mm_setzero_si128());
        _mm_cvtsi128_si32(y) as u32
    }

    /// Expands `key` (16, 24 or 32 bytes, checked by the caller) for `width`.
    ///
    /// # Safety
    /// The CPU must have AES-NI and SSE4.1, and every feature of `width` (the caller checked
    /// `width.supported()`).
    #[target_feature(enable = "aes,sse4.1")]
    pub(super) unsafe fn expand(key: &[u8], width: Width) -> Keys {
        let mut keys = Keys {
            width,
            rounds: 0,
            enc: [[0u8; 16]; 15],
            dec: [[0u8; 16]; 15],
        };
        // SAFETY: the caller's guarantee.
        keys.rounds = unsafe { expand_into(key, &mut keys.enc, &mut keys.dec) };
        keys
    }

    /// The AES key schedule of `key` (16, 24 or 32 bytes, checked by the caller) written into
    /// the caller's (wiped-on-drop) tables: `enc` for encryption and `dec` for the equivalent
    /// inverse cipher (FIPS-197 §5.3.5). Returns the number of rounds. The VAES-512 module's
    /// keys come from here too.
    ///
    /// # Safety
    /// The CPU must have AES-NI and SSE4.1.
    #[target_feature(enable = "aes,sse4.1")]
    pub(crate) unsafe fn expand_into(
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

    /// Runs `$body` (an `unsafe` call into module `$m`) with `$m` naming the width module of
    /// `$keys` and `$nr` its rounds.
    macro_rules! on_width {
        ($keys:expr, $m:ident, $nr:ident => $body:expr) => {
            match $keys.width {
                Width::Xmm => {
                    use xmm as $m;
                    by_rounds!($keys, $nr => $body)
                }
                Width::Ymm => {
                    use ymm as $m;
                    by_rounds!($keys, $nr => $body)
                }
            }
        };
    }

    // ---------------------------------------------------------------------------------------
    // GF(2^128) arithmetic on byte-reflected blocks (Intel's carry-less multiplication white
    // paper, algorithm 5), shared by both widths.

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reflect(x: __m128i) -> __m128i {
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

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn gfmul(a: __m128i, b: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(a, b);
        let hi = _mm_clmulepi64_si128::<0x11>(a, b);
        let mid = _mm_xor_si128(
            _mm_clmulepi64_si128::<0x10>(a, b),
            _mm_clmulepi64_si128::<0x01>(a, b),
        );
        reduce(
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// `hi:lo` from the three accumulated partial products, reduced.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse4.1")]
    fn reduce3(lo: __m128i, hi: __m128i, mid: __m128i) -> __m128i {
        reduce(
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }

    /// Fills `keys.h` with H^1..H^16, H = AES_K(0^128), byte-reflected.
    ///
    /// # Safety
    /// The CPU must have AES-NI, SSE4.1 and PCLMULQDQ (a `Keys` exists).
    #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
    pub(super) unsafe fn gcm_powers(keys: &mut GcmKeys) {
        let mut zero = [0u8; 16];
        encrypt_block(&keys.aes, &mut zero);
        let h = reflect(load128(&zero));
        zero.zeroize();
        let mut p = h;
        for slot in keys.h.iter_mut() {
            store128(slot, p);
            p = gfmul(p, h);
        }
    }

    /// Splits `len` bytes of CTR where the low 32-bit word of the counter wraps (the kernels
    /// add to that word only) and calls `run(first counter block, byte range)` for each piece,
    /// carrying into the upper 96 bits here.
    fn ctr_segments(
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

    /// PSHUFB mask that swaps the low 32-bit word of a counter block between big-endian (as
    /// the cipher sees it) and little-endian (so PADDD counts).
    const SWAP_LOW_WORD: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13, 12];
    /// PSHUFB mask that reverses the bytes of a block (GHASH works on reflected blocks).
    const REVERSE: [u8; 16] = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];

    // ---------------------------------------------------------------------------------------
    // The kernels, written once over the width primitives.

    macro_rules! kernels {
        ($feat:literal) => {
            use super::{gfmul, reduce3, reflect, GcmKeys, Keys, REVERSE, SWAP_LOW_WORD};
            use zeroize::Zeroize;

            /// Registers in flight in the parallel modes.
            const R: usize = REGS;
            /// Bytes per register.
            const REG: usize = B * 16;
            /// Bytes per main-loop iteration.
            const STEP: usize = R * REG;

            #[inline]
            #[target_feature(enable = $feat)]
            fn round_keys(k: &[[u8; 16]; 15]) -> [V; 15] {
                let mut out = [zero(); 15];
                for (o, k) in out.iter_mut().zip(k) {
                    *o = bcast(k);
                }
                out
            }

            /// Keeps the rounds in round-major order: each register passes through an empty
            /// `asm!` after every round, and `asm!` blocks keep their order, so round `k + 1` of
            /// any register cannot be scheduled before round `k` of every register. Without it
            /// LLVM emits the rounds block by block (to save registers), which leaves fewer
            /// blocks in the CPU's scheduler than the AES units' latency needs.
            #[inline]
            #[target_feature(enable = $feat)]
            fn pin_all<const N: usize>(x: &mut [V; N]) {
                for v in x.iter_mut() {
                    pin(v);
                }
            }

            #[inline]
            #[target_feature(enable = $feat)]
            fn enc_regs<const NR: usize, const N: usize>(rk: &[V; 15], x: &mut [V; N]) {
                for v in x.iter_mut() {
                    *v = xor(*v, rk[0]);
                }
                for k in &rk[1..NR] {
                    for v in x.iter_mut() {
                        *v = aesenc(*v, *k);
                    }
                    pin_all(x);
                }
                for v in x.iter_mut() {
                    *v = aesenclast(*v, rk[NR]);
                }
            }

            #[inline]
            #[target_feature(enable = $feat)]
            fn dec_regs<const NR: usize, const N: usize>(rk: &[V; 15], x: &mut [V; N]) {
                for v in x.iter_mut() {
                    *v = xor(*v, rk[0]);
                }
                for k in &rk[1..NR] {
                    for v in x.iter_mut() {
                        *v = aesdec(*v, *k);
                    }
                    pin_all(x);
                }
                for v in x.iter_mut() {
                    *v = aesdeclast(*v, rk[NR]);
                }
            }

            /// Loads one register from `d[at..]`: directly when a whole register remains,
            /// else through a zero-padded stack buffer.
            #[inline]
            #[target_feature(enable = $feat)]
            fn ld_any(d: &[u8], at: usize) -> V {
                if at + REG <= d.len() {
                    return ld(d, at);
                }
                let mut buf = [0u8; REG];
                let n = d.len() - at;
                buf[..n].copy_from_slice(&d[at..]);
                let v = ld(&buf, 0);
                buf.zeroize();
                v
            }

            /// Stores the first `min(REG, d.len() - at)` bytes of `v` to `d[at..]`.
            #[inline]
            #[target_feature(enable = $feat)]
            fn st_any(d: &mut [u8], at: usize, v: V) {
                if at + REG <= d.len() {
                    return st(d, at, v);
                }
                let mut buf = [0u8; REG];
                st(&mut buf, 0, v);
                let n = d.len() - at;
                d[at..].copy_from_slice(&buf[..n]);
                buf.zeroize();
            }

            // -----------------------------------------------------------------------------
            // ECB.

            /// ECB over whole blocks in place.
            #[target_feature(enable = $feat)]
            pub(super) fn ecb<const NR: usize, const DECRYPT: bool>(keys: &Keys, data: &mut [u8]) {
                let rk = round_keys(if DECRYPT { &keys.dec } else { &keys.enc });
                // Whole steps as fixed-size arrays, so that the register loads and stores need
                // no bounds checks (which would also keep the compiler from interleaving).
                let (steps, tail) = data.as_chunks_mut::<STEP>();
                for chunk in steps {
                    let mut x = [zero(); R];
                    for (i, v) in x.iter_mut().enumerate() {
                        *v = ld(chunk, REG * i);
                    }
                    if DECRYPT {
                        dec_regs::<NR, R>(&rk, &mut x);
                    } else {
                        enc_regs::<NR, R>(&rk, &mut x);
                    }
                    for (i, v) in x.iter().enumerate() {
                        st(chunk, REG * i, *v);
                    }
                }
                let data = tail;
                let mut at = 0;
                while at < data.len() {
                    let mut x = [ld_any(data, at)];
                    if DECRYPT {
                        dec_regs::<NR, 1>(&rk, &mut x);
                    } else {
                        enc_regs::<NR, 1>(&rk, &mut x);
                    }
                    st_any(data, at, x[0]);
                    at += REG;
                }
            }

            // -----------------------------------------------------------------------------
            // CTR with a 128-bit big-endian counter whose low word does not wrap in `data`.

            /// Writes `src` (or `chunk` itself when `None`) XOR the keystream registers `ks` to
            /// `chunk`, a register per `REG` bytes.
            #[inline]
            #[target_feature(enable = $feat)]
            fn xor_keystream<const N: usize>(ks: &[V; N], src: Option<&[u8]>, chunk: &mut [u8]) {
                for (i, v) in ks.iter().enumerate() {
                    let d = match src {
                        Some(from) => ld(from, REG * i),
                        None => ld(chunk, REG * i),
                    };
                    st(chunk, REG * i, xor(d, *v));
                }
            }

            /// CTR in place, or (`OUT`) from `src` to `data`.
            #[target_feature(enable = $feat)]
            pub(super) fn ctr32<const NR: usize, const OUT: bool>(
                keys: &Keys,
                block: &[u8; 16],
                src: &[u8],
                data: &mut [u8],
            ) {
                debug_assert!(!OUT || src.len() == data.len());
                let rk = round_keys(&keys.enc);
                let mut le = *block;
                le[12..16].reverse();
                let swap = bcast(&SWAP_LOW_WORD);
                let mut ctr = ctr_start(&le);
                le.zeroize();
                let step = ctr_step();
                let whole = data.len() / STEP * STEP;
                let (steps, tail) = data.split_at_mut(whole);
                let (steps, _) = steps.as_chunks_mut::<STEP>();
                let src_steps: &[[u8; STEP]] = if OUT { src[..whole].as_chunks().0 } else { &[] };
                for (n, chunk) in steps.iter_mut().enumerate() {
                    let mut x = [zero(); R];
                    for v in x.iter_mut() {
                        *v = shuffle(ctr, swap);
                        ctr = add32(ctr, step);
                    }
                    enc_regs::<NR, R>(&rk, &mut x);
                    xor_keystream(&x, if OUT { Some(&src_steps[n][..]) } else { None }, chunk);
                }
                let src = if OUT { &src[whole..] } else { src };
                let data = tail;
                let mut at = 0;
                while at < data.len() {
                    let mut x = [shuffle(ctr, swap)];
                    ctr = add32(ctr, step);
                    enc_regs::<NR, 1>(&rk, &mut x);
                    let d = ld_any(if OUT { src } else { data }, at);
                    st_any(data, at, xor(d, x[0]));
                    at += REG;
                }
            }

            // -----------------------------------------------------------------------------
            // CBC and CFB decryption: parallel, the previous ciphertext block of each block
            // assembled from registers (the data is decrypted in place).

            /// CBC (`CBC`) or CFB-128 decryption of whole blocks in place from `iv`.
            #[target_feature(enable = $feat)]
            pub(super) fn chained<const NR: usize, const CBC: bool>(
                keys: &Keys,
                iv: &[u8; 16],
                data: &mut [u8],
            ) {
                let rk = round_keys(if CBC { &keys.dec } else { &keys.enc });
                // `carry` holds the ciphertext block before the current register in its last
                // lane.
                let mut carry = bcast(iv);
                let (steps, tail) = data.as_chunks_mut::<STEP>();
                for chunk in steps {
                    let mut c = [zero(); R];
                    for (i, v) in c.iter_mut().enumerate() {
                        *v = ld(chunk, REG * i);
                    }
                    let mut prev = [zero(); R];
                    prev[0] = before(c[0], carry);
                    for i in 1..R {
                        prev[i] = before(c[i], c[i - 1]);
                    }
                    carry = c[R - 1];
                    if CBC {
                        dec_regs::<NR, R>(&rk, &mut c);
                        for i in 0..R {
                            st(chunk, REG * i, xor(c[i], prev[i]));
                        }
                    } else {
                        let cipher = c;
                        enc_regs::<NR, R>(&rk, &mut prev);
                        for i in 0..R {
                            st(chunk, REG * i, xor(cipher[i], prev[i]));
                        }
                    }
                }
                let data = tail;
                let mut at = 0;
                while at < data.len() {
                    let c = ld_any(data, at);
                    let mut p = [before(c, carry)];
                    carry = c;
                    let out = if CBC {
                        let mut d = [c];
                        dec_regs::<NR, 1>(&rk, &mut d);
                        xor(d[0], p[0])
                    } else {
                        enc_regs::<NR, 1>(&rk, &mut p);
                        xor(c, p[0])
                    };
                    st_any(data, at, out);
                    at += REG;
                }
            }

            // -----------------------------------------------------------------------------
            // CBC encryption across pages: each 128-bit lane of the `Z` registers is a page.

            /// `steps` blocks of CBC on each of `slices` (each exactly `steps` blocks, at most
            /// `Z * B` of them), chaining values in `chains` (updated).
            #[target_feature(enable = $feat)]
            pub(super) fn cbc_phase<const NR: usize, const Z: usize>(
                keys: &Keys,
                chains: &mut [[u8; 16]],
                slices: &mut [&mut [u8]],
                steps: usize,
            ) {
                let n = slices.len();
                assert!(n <= Z * B && chains.len() >= Z * B);
                assert!(slices.iter().all(|s| s.len() == steps * 16));
                let rk = round_keys(&keys.enc);
                let mut chain = [zero(); Z];
                for (z, c) in chain.iter_mut().enumerate() {
                    *c = ld(chains[z * B..z * B + B].as_flattened(), 0);
                }
                // Lanes past `n` encrypt zeros into nothing.
                let empty = _mm_setzero_si128();
                for i in 0..steps {
                    let at = i * 16;
                    let mut x = [zero(); Z];
                    for (z, v) in x.iter_mut().enumerate() {
                        let mut lanes = [empty; B];
                        for (l, lane) in lanes.iter_mut().enumerate() {
                            if let Some(s) = slices.get(z * B + l) {
                                *lane = ld128(s[at..at + 16].try_into().expect("16 bytes"));
                            }
                        }
                        *v = xor(from_lanes(lanes), chain[z]);
                    }
                    enc_regs::<NR, Z>(&rk, &mut x);
                    for (z, v) in x.iter().enumerate() {
                        chain[z] = *v;
                        for (l, lane) in to_lanes(*v).into_iter().enumerate() {
                            if let Some(s) = slices.get_mut(z * B + l) {
                                st128((&mut s[at..at + 16]).try_into().expect("16 bytes"), lane);
                            }
                        }
                    }
                }
                for (z, c) in chain.iter().enumerate() {
                    st(chains[z * B..z * B + B].as_flattened_mut(), 0, *c);
                }
            }

            // -----------------------------------------------------------------------------
            // GHASH, `R * B` blocks per reduction, Karatsuba: three carry-less multiplies a
            // register instead of four (the middle term from the XOR of each operand's halves).
            // GHASH takes longer than AES-256-CTR over the same bytes; one multiply in four
            // fewer gained little, but never lost (`bench/seal.py` measures GCM).

            /// The hash key powers for a step of `N` registers: register `k` multiplies blocks
            /// `B*k..B*k+B-1` of the step by `H^(NB-Bk-l)` (lane `l`), so one reduction covers
            /// the step; and for Karatsuba, each power's two halves XORed (in both halves).
            #[inline]
            #[target_feature(enable = $feat)]
            fn ghash_powers<const N: usize>(keys: &GcmKeys) -> ([V; N], [V; N]) {
                let mut hp = [zero(); N];
                let mut hx = [zero(); N];
                for k in 0..N {
                    let mut lanes = [[0u8; 16]; B];
                    for (l, lane) in lanes.iter_mut().enumerate() {
                        *lane = keys.h[N * B - 1 - B * k - l];
                    }
                    hp[k] = ld(lanes.as_flattened(), 0);
                    hx[k] = xor(hp[k], swap_halves(hp[k]));
                }
                (hp, hx)
            }

            /// The running sums of one step's products: low, high and Karatsuba middle halves.
            #[derive(Clone, Copy)]
            struct Products {
                lo: V,
                hi: V,
                mid: V,
            }

            impl Products {
                #[inline]
                #[target_feature(enable = $feat)]
                fn new() -> Products {
                    Products {
                        lo: zero(),
                        hi: zero(),
                        mid: zero(),
                    }
                }

                /// Adds the product of the (byte-swapped) blocks `x` with `h` (and `hx`, its
                /// halves XORed).
                #[inline]
                #[target_feature(enable = $feat)]
                fn add(&mut self, x: V, h: V, hx: V) {
                    self.lo = xor(self.lo, clmul00(x, h));
                    self.hi = xor(self.hi, clmul11(x, h));
                    self.mid = xor(self.mid, clmul00(xor(x, swap_halves(x)), hx));
                }

                /// The reduced sum (the middle term is Karatsuba's less the low and high).
                #[inline]
                #[target_feature(enable = $feat)]
                fn reduced(self) -> __m128i {
                    let mid = xor(self.mid, xor(self.lo, self.hi));
                    reduce3(fold(self.lo), fold(self.hi), fold(mid))
                }
            }

            /// GHASH state `y` (reflected) updated with `data` (zero-padded to whole blocks).
            #[target_feature(enable = $feat)]
            pub(super) fn ghash(keys: &GcmKeys, mut y: __m128i, data: &[u8]) -> __m128i {
                let swap = bcast(&REVERSE);
                let (hp, hx) = ghash_powers::<R>(keys);
                let h1 = ld128(&keys.h[0]);
                let (steps, tail) = data.as_chunks::<STEP>();
                for chunk in steps {
                    let mut p = Products::new();
                    for k in 0..R {
                        let mut x = shuffle(ld(chunk, REG * k), swap);
                        if k == 0 {
                            x = xor(x, lane0(y));
                        }
                        p.add(x, hp[k], hx[k]);
                    }
                    y = p.reduced();
                }
                for block in tail.chunks(16) {
                    let mut padded = [0u8; 16];
                    padded[..block.len()].copy_from_slice(block);
                    y = gfmul(_mm_xor_si128(y, reflect(ld128(&padded))), h1);
                    padded.zeroize();
                }
                y
            }

            /// GCM decryption of whole steps, stitched: each step's counter blocks go through
            /// the AES rounds while the same step's ciphertext is hashed between them, so AES
            /// and the carry-less multiplies can run at once. (Measured against the two-pass
            /// kernel, alternating: the rounds and the multiplies share execution pipes on the
            /// cores tried, so stitching gains about a tenth, not the half that separate units
            /// would give.)
            /// From `src` into `data` (`OUT`), or in place. `block` is the first counter block
            /// (its low word does not wrap in `data`); `data.len()` is a multiple of `GSTEP`.
            /// Returns the updated GHASH state.
            #[target_feature(enable = $feat)]
            fn gcm_dec_steps<const NR: usize, const OUT: bool>(
                keys: &GcmKeys,
                block: &[u8; 16],
                mut y: __m128i,
                src: &[u8],
                data: &mut [u8],
            ) -> __m128i {
                debug_assert!(data.len() % GSTEP == 0 && (!OUT || src.len() == data.len()));
                let rk = round_keys(&keys.aes.enc);
                let (hp, hx) = ghash_powers::<G>(keys);
                let swap = bcast(&REVERSE);
                let swap_word = bcast(&SWAP_LOW_WORD);
                let mut le = *block;
                le[12..16].reverse();
                let mut ctr = ctr_start(&le);
                le.zeroize();
                let step = ctr_step();
                let (steps, _) = data.as_chunks_mut::<GSTEP>();
                let src_steps: &[[u8; GSTEP]] = if OUT { src.as_chunks().0 } else { &[] };
                for (n, chunk) in steps.iter_mut().enumerate() {
                    let mut x = [zero(); G];
                    for v in x.iter_mut() {
                        *v = xor(shuffle(ctr, swap_word), rk[0]);
                        ctr = add32(ctr, step);
                    }
                    let mut p = Products::new();
                    {
                        let from: &[u8; GSTEP] = if OUT { &src_steps[n] } else { &*chunk };
                        let mut hash = |k: usize| {
                            let mut c = shuffle(ld(from, REG * k), swap);
                            if k == 0 {
                                c = xor(c, lane0(y));
                            }
                            p.add(c, hp[k], hx[k]);
                        };
                        // Register k is hashed after round k + 1, the registers left after the
                        // last round (more registers than rounds) then. (LLVM keeps this loop
                        // rolled; written out round by round it ran no faster.)
                        for r in 1..NR {
                            for v in x.iter_mut() {
                                *v = aesenc(*v, rk[r]);
                            }
                            pin_all(&mut x);
                            if r <= G {
                                hash(r - 1);
                            }
                        }
                        for k in NR - 1..G {
                            hash(k);
                        }
                        for v in x.iter_mut() {
                            *v = aesenclast(*v, rk[NR]);
                        }
                    }
                    y = p.reduced();
                    xor_keystream(&x, if OUT { Some(&src_steps[n][..]) } else { None }, chunk);
                }
                y
            }

            /// Registers per step of the stitched GCM decryption: with the hash's operands and
            /// sums, more than 8 AES registers do not fit the 16 vector registers (`xmm`: 12
            /// registers spilled and ran markedly slower than 8).
            const G: usize = if R < 8 { R } else { 8 };
            /// Bytes per step of the stitched GCM decryption.
            const GSTEP: usize = G * REG;

            /// Bytes per step of the GCM encryption loop: CTR and then GHASH on the same chunk
            /// while it is in the L1 cache (a multiple of `STEP`).
            const GCM_CHUNK: usize = STEP * (8192 / STEP);

            /// GCM over `data` in place, or when decrypting with `src`, from `src` (the
            /// ciphertext, `data`'s length) into `data`, no copy first. GHASH always hashes the
            /// ciphertext: decryption hashes each step while its counter blocks go through AES
            /// ([`gcm_dec_steps`]); encryption runs CTR and then GHASH over each chunk while it
            /// is in the L1 cache. Returns the tag.
            #[target_feature(enable = $feat)]
            pub(super) fn gcm<const NR: usize>(
                keys: &GcmKeys,
                nonce: &[u8; 12],
                aad: &[u8],
                src: Option<&[u8]>,
                data: &mut [u8],
                decrypt: bool,
            ) -> [u8; 16] {
                debug_assert!(src.is_none_or(|s| decrypt && s.len() == data.len()));
                let mut lengths = [0u8; 16];
                lengths[..8].copy_from_slice(&(aad.len() as u64 * 8).to_be_bytes());
                lengths[8..].copy_from_slice(&(data.len() as u64 * 8).to_be_bytes());
                // The 32-bit counter starts at 2 and cannot wrap within the GCM limit
                // (2^32 - 2 blocks, checked by the caller), so plain `ctr32` gives inc32.
                let mut counter = u128::from_be_bytes(super::gcm_counter(nonce));
                let mut y = _mm_setzero_si128();
                y = ghash(keys, y, aad);
                if decrypt {
                    // Whole steps stitched, then the rest (under one step) in two passes.
                    let whole = data.len() / GSTEP * GSTEP;
                    let (steps, rest) = data.split_at_mut(whole);
                    if let Some(src) = src {
                        y = gcm_dec_steps::<NR, true>(
                            keys,
                            &counter.to_be_bytes(),
                            y,
                            &src[..whole],
                            steps,
                        );
                    } else {
                        y = gcm_dec_steps::<NR, false>(keys, &counter.to_be_bytes(), y, &[], steps);
                    }
                    counter = counter.wrapping_add((whole / 16) as u128);
                    if let Some(src) = src {
                        y = ghash(keys, y, &src[whole..]);
                        ctr32::<NR, true>(&keys.aes, &counter.to_be_bytes(), &src[whole..], rest);
                    } else {
                        y = ghash(keys, y, rest);
                        ctr32::<NR, false>(&keys.aes, &counter.to_be_bytes(), &[], rest);
                    }
                } else {
                    for chunk in data.chunks_mut(GCM_CHUNK) {
                        ctr32::<NR, false>(&keys.aes, &counter.to_be_bytes(), &[], chunk);
                        y = ghash(keys, y, chunk);
                        counter = counter.wrapping_add((chunk.len() / 16) as u128);
                    }
                }
                y = ghash(keys, y, &lengths);
                let mut s = [0u8; 16];
                st128(&mut s, reflect(y));
                let mut j0 = [0u8; 16];
                j0[..12].copy_from_slice(nonce);
                j0[15] = 1;
                let mut e = [ld128(&j0)];
                let rk = [
                    ld128(&keys.aes.enc[0]),
                    ld128(&keys.aes.enc[1]),
                    ld128(&keys.aes.enc[2]),
                    ld128(&keys.aes.enc[3]),
                    ld128(&keys.aes.enc[4]),
                    ld128(&keys.aes.enc[5]),
                    ld128(&keys.aes.enc[6]),
                    ld128(&keys.aes.enc[7]),
                    ld128(&keys.aes.enc[8]),
                    ld128(&keys.aes.enc[9]),
                    ld128(&keys.aes.enc[10]),
                    ld128(&keys.aes.enc[11]),
                    ld128(&keys.aes.enc[12]),
                    ld128(&keys.aes.enc[13]),
                    ld128(&keys.aes.enc[14]),
                ];
                e[0] = _mm_xor_si128(e[0], rk[0]);
                for k in &rk[1..NR] {
                    e[0] = _mm_aesenc_si128(e[0], *k);
                }
                e[0] = _mm_aesenclast_si128(e[0], rk[NR]);
                st128(&mut j0, e[0]);
                for (t, e) in s.iter_mut().zip(j0) {
                    *t ^= e;
                }
                j0.zeroize();
                s
            }

            #[inline]
            #[target_feature(enable = $feat)]
            fn ld128(b: &[u8; 16]) -> __m128i {
                // SAFETY: 16 readable bytes.
                unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
            }

            #[inline]
            #[target_feature(enable = $feat)]
            fn st128(b: &mut [u8; 16], x: __m128i) {
                // SAFETY: 16 writable bytes.
                unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), x) }
            }
        };
    }

    /// AES-NI on 128-bit registers: one block per register.
    mod xmm {
        use std::arch::x86_64::*;

        type V = __m128i;
        const B: usize = 1;
        /// Registers in flight (12 of the 16 xmm registers: more independent AES instructions
        /// than the two AES units' 4-cycle latency needs, to absorb the loads, XORs and
        /// counter updates around them).
        const REGS: usize = 12;

        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn zero() -> V {
            _mm_setzero_si128()
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn bcast(k: &[u8; 16]) -> V {
            // SAFETY: 16 readable bytes.
            unsafe { _mm_loadu_si128(k.as_ptr().cast()) }
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn ld(d: &[u8], at: usize) -> V {
            assert!(at + 16 <= d.len());
            // SAFETY: bounds checked above.
            unsafe { _mm_loadu_si128(d.as_ptr().add(at).cast()) }
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn st(d: &mut [u8], at: usize, v: V) {
            assert!(at + 16 <= d.len());
            // SAFETY: bounds checked above.
            unsafe { _mm_storeu_si128(d.as_mut_ptr().add(at).cast(), v) }
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn xor(a: V, b: V) -> V {
            _mm_xor_si128(a, b)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn aesenc(a: V, k: V) -> V {
            _mm_aesenc_si128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn aesenclast(a: V, k: V) -> V {
            _mm_aesenclast_si128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn aesdec(a: V, k: V) -> V {
            _mm_aesdec_si128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn aesdeclast(a: V, k: V) -> V {
            _mm_aesdeclast_si128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn shuffle(a: V, m: V) -> V {
            _mm_shuffle_epi8(a, m)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn add32(a: V, b: V) -> V {
            _mm_add_epi32(a, b)
        }
        /// Counter blocks `le, le + 1, ...` (low word little-endian), one per lane.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn ctr_start(le: &[u8; 16]) -> V {
            bcast(le)
        }
        /// Adds `B` to the low word of every lane.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn ctr_step() -> V {
            _mm_set_epi32(1, 0, 0, 0)
        }
        /// The ciphertext block before each block of `c`, `prev` being the register before.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn before(_c: V, prev: V) -> V {
            prev
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn clmul00(a: V, b: V) -> V {
            _mm_clmulepi64_si128::<0x00>(a, b)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn clmul11(a: V, b: V) -> V {
            _mm_clmulepi64_si128::<0x11>(a, b)
        }
        /// The two 64-bit halves of each block swapped.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn swap_halves(a: V) -> V {
            _mm_shuffle_epi32::<0x4e>(a)
        }
        /// XOR of the lanes.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn fold(a: V) -> __m128i {
            a
        }
        /// `y` in lane 0, zero elsewhere.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn lane0(y: __m128i) -> V {
            y
        }
        /// An empty `asm!` the register passes through (an ordering point, no instruction).
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn pin(v: &mut V) {
            // SAFETY: an empty instruction string: reads and writes nothing but the register.
            unsafe {
                std::arch::asm!(
                    "/* {0} */",
                    inout(xmm_reg) * v,
                    options(nomem, nostack, preserves_flags)
                )
            };
        }
        /// A register from its 128-bit lanes.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn from_lanes(l: [__m128i; B]) -> V {
            l[0]
        }
        /// The 128-bit lanes of a register.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx,avx2")]
        fn to_lanes(v: V) -> [__m128i; B] {
            [v]
        }

        kernels!("aes,pclmulqdq,sse4.1,avx,avx2");
    }

    /// VAES on 256-bit registers: two blocks per register.
    mod ymm {
        use std::arch::x86_64::*;

        type V = __m256i;
        const B: usize = 2;
        /// Registers in flight.
        const REGS: usize = 8;

        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn zero() -> V {
            _mm256_setzero_si256()
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn bcast(k: &[u8; 16]) -> V {
            // SAFETY: 16 readable bytes.
            _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(k.as_ptr().cast()) })
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn ld(d: &[u8], at: usize) -> V {
            assert!(at + 32 <= d.len());
            // SAFETY: bounds checked above.
            unsafe { _mm256_loadu_si256(d.as_ptr().add(at).cast()) }
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn st(d: &mut [u8], at: usize, v: V) {
            assert!(at + 32 <= d.len());
            // SAFETY: bounds checked above.
            unsafe { _mm256_storeu_si256(d.as_mut_ptr().add(at).cast(), v) }
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn xor(a: V, b: V) -> V {
            _mm256_xor_si256(a, b)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn aesenc(a: V, k: V) -> V {
            _mm256_aesenc_epi128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn aesenclast(a: V, k: V) -> V {
            _mm256_aesenclast_epi128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn aesdec(a: V, k: V) -> V {
            _mm256_aesdec_epi128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn aesdeclast(a: V, k: V) -> V {
            _mm256_aesdeclast_epi128(a, k)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn shuffle(a: V, m: V) -> V {
            _mm256_shuffle_epi8(a, m)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn add32(a: V, b: V) -> V {
            _mm256_add_epi32(a, b)
        }
        /// Counter blocks `le, le + 1` (low word little-endian), one per lane.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn ctr_start(le: &[u8; 16]) -> V {
            _mm256_add_epi32(bcast(le), _mm256_set_epi32(1, 0, 0, 0, 0, 0, 0, 0))
        }
        /// Adds `B` to the low word of every lane.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn ctr_step() -> V {
            _mm256_set_epi32(2, 0, 0, 0, 2, 0, 0, 0)
        }
        /// The ciphertext block before each block of `c` (lane 0: the high lane of `prev`;
        /// lane 1: the low lane of `c`).
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn before(c: V, prev: V) -> V {
            _mm256_permute2x128_si256::<0x03>(c, prev)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn clmul00(a: V, b: V) -> V {
            _mm256_clmulepi64_epi128::<0x00>(a, b)
        }
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn clmul11(a: V, b: V) -> V {
            _mm256_clmulepi64_epi128::<0x11>(a, b)
        }
        /// The two 64-bit halves of each block swapped.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn swap_halves(a: V) -> V {
            _mm256_shuffle_epi32::<0x4e>(a)
        }
        /// XOR of the two lanes.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn fold(a: V) -> __m128i {
            _mm_xor_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a))
        }
        /// `y` in lane 0, zero in lane 1.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn lane0(y: __m128i) -> V {
            _mm256_zextsi128_si256(y)
        }
        /// An empty `asm!` the register passes through (an ordering point, no instruction).
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn pin(v: &mut V) {
            // SAFETY: an empty instruction string: reads and writes nothing but the register.
            unsafe {
                std::arch::asm!(
                    "/* {0} */",
                    inout(ymm_reg) * v,
                    options(nomem, nostack, preserves_flags)
                )
            };
        }
        /// A register from its 128-bit lanes.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn from_lanes(l: [__m128i; B]) -> V {
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(l[0]), l[1])
        }
        /// The 128-bit lanes of a register.
        #[inline]
        #[target_feature(enable = "aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq")]
        fn to_lanes(v: V) -> [__m128i; B] {
            [_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)]
        }

        kernels!("aes,pclmulqdq,sse4.1,avx2,vaes,vpclmulqdq");
    }

    /// The first counter block for the data: nonce || 2.
    fn gcm_counter(nonce: &[u8; 12]) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..12].copy_from_slice(nonce);
        c[15] = 2;
        c
    }

    // ---------------------------------------------------------------------------------------
    // The safe entry points: each calls the width module its `Keys` was built (and checked)
    // for.

    /// ECB encryption of whole blocks in place.
    pub(crate) fn ecb_encrypt(keys: &Keys, data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        // SAFETY: a `Keys` of a width exists only when the CPU has that width's features.
        on_width!(keys, m, NR => unsafe { m::ecb::<NR, false>(keys, data) })
    }

    /// ECB decryption of whole blocks in place.
    pub(crate) fn ecb_decrypt(keys: &Keys, data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        // SAFETY: as in `ecb_encrypt`.
        on_width!(keys, m, NR => unsafe { m::ecb::<NR, true>(keys, data) })
    }

    /// XORs the CTR keystream (128-bit big-endian counter from `iv`) into `data`.
    pub(crate) fn ctr_apply(keys: &Keys, iv: &[u8; 16], data: &mut [u8]) {
        ctr_segments(iv, data.len(), |counter, range| {
            // SAFETY: as in `ecb_encrypt`.
            on_width!(keys, m, NR => unsafe {
                m::ctr32::<NR, false>(keys, counter, &[], &mut data[range.clone()])
            })
        });
    }

    /// As [`ctr_apply`], reading `src` and writing `dst` (of the same length).
    pub(crate) fn ctr_apply_to(keys: &Keys, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
        assert_eq!(src.len(), dst.len());
        ctr_segments(iv, src.len(), |counter, range| {
            // SAFETY: as in `ecb_encrypt`.
            on_width!(keys, m, NR => unsafe {
                m::ctr32::<NR, true>(keys, counter, &src[range.clone()], &mut dst[range.clone()])
            })
        });
    }

    /// CBC decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cbc_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        chained_decrypt::<true>(keys, iv, data);
    }

    /// CFB-128 decryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        chained_decrypt::<false>(keys, iv, data);
    }

    fn chained_decrypt<const CBC: bool>(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        if data.is_empty() {
            return;
        }
        let last: [u8; 16] = data[data.len() - 16..].try_into().expect("16 bytes");
        // SAFETY: as in `ecb_encrypt`.
        on_width!(keys, m, NR => unsafe { m::chained::<NR, CBC>(keys, iv, data) });
        *iv = last;
    }

    /// CBC-encrypts independent pages in place, [`Width::lanes`] side by side. Each lane is
    /// `(iv, data)` with `data` whole blocks; lanes may differ in length. Each `iv` becomes the
    /// lane's last ciphertext block.
    pub(crate) fn cbc_encrypt_lanes(keys: &Keys, lanes: &mut [([u8; 16], &mut [u8])]) {
        assert!(lanes.iter().all(|(_, d)| d.len().is_multiple_of(16)));
        for group in lanes.chunks_mut(keys.width.lanes()) {
            cbc_group(keys, group);
        }
    }

    fn cbc_group(keys: &Keys, lanes: &mut [([u8; 16], &mut [u8])]) {
        // Phases: all running lanes are at the same block; each phase runs them together until
        // the shortest one ends, then drops the lanes that ended.
        let b = match keys.width {
            Width::Xmm => 1,
            Width::Ymm => 2,
        };
        let mut pos = 0usize;
        loop {
            let running: Vec<usize> = (0..lanes.len())
                .filter(|&j| lanes[j].1.len() / 16 > pos)
                .collect();
            let Some(steps) = running.iter().map(|&j| lanes[j].1.len() / 16 - pos).min() else {
                break;
            };
            let mut chains = [[0u8; 16]; 16];
            let mut slices: Vec<&mut [u8]> = Vec::with_capacity(running.len());
            {
                let mut taken: Vec<Option<&mut ([u8; 16], &mut [u8])>> =
                    lanes.iter_mut().map(Some).collect();
                for (s, &j) in running.iter().enumerate() {
                    let lane = taken[j].take().expect("each lane once");
                    chains[s] = lane.0;
                    slices.push(&mut lane.1[pos * 16..(pos + steps) * 16]);
                }
                let regs = running.len().div_ceil(b);
                // SAFETY: as in `ecb_encrypt`.
                on_width!(keys, m, NR => unsafe {
                    match regs {
                        1 => m::cbc_phase::<NR, 1>(keys, &mut chains, &mut slices, steps),
                        2 => m::cbc_phase::<NR, 2>(keys, &mut chains, &mut slices, steps),
                        3 | 4 => m::cbc_phase::<NR, 4>(keys, &mut chains, &mut slices, steps),
                        _ => m::cbc_phase::<NR, 8>(keys, &mut chains, &mut slices, steps),
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

    // ---------------------------------------------------------------------------------------
    // Sequential modes, one AES-NI block at a time (both widths: the chain allows nothing
    // else).

    /// Encrypts one block in place.
    pub(crate) fn encrypt_block(keys: &Keys, block: &mut [u8; 16]) {
        // SAFETY: every width implies AES-NI and SSE4.1.
        unsafe { encrypt_block_in(&keys.table(), block) }
    }

    /// CFB-128 encryption of whole blocks in place; `iv` becomes the last ciphertext block.
    pub(crate) fn cfb_encrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { chain_in::<CFB>(&keys.table(), iv, data) }
    }

    /// OFB over whole blocks in place; `iv` becomes the last keystream block.
    pub(crate) fn ofb_apply(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { chain_in::<OFB>(&keys.table(), iv, data) }
    }

    /// CBC encryption of one chain of whole blocks in place; `iv` becomes the last ciphertext
    /// block.
    pub(crate) fn cbc_encrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
        // SAFETY: as in `encrypt_block`.
        unsafe { chain_in::<CBC>(&keys.table(), iv, data) }
    }

    /// Encryption round keys for the one-block loops, which the VAES-512 module shares.
    pub(crate) struct RoundTable<'a> {
        pub(crate) enc: &'a [[u8; 16]; 15],
        pub(crate) rounds: usize,
    }

    impl Keys {
        fn table(&self) -> RoundTable<'_> {
            RoundTable {
                enc: &self.enc,
                rounds: self.rounds,
            }
        }
    }

    /// Encrypts one block in place.
    ///
    /// # Safety
    /// The CPU has AES-NI and SSE4.1.
    pub(crate) unsafe fn encrypt_block_in(t: &RoundTable<'_>, block: &mut [u8; 16]) {
        // SAFETY: the caller's guarantee.
        by_rounds!(t, NR => unsafe { encrypt_one::<NR>(t.enc, block) })
    }

    /// A chained mode (`CFB` or `CBC` encryption, `OFB`) over whole blocks in place; `iv`
    /// becomes the last ciphertext (CFB, CBC) or keystream (OFB) block.
    ///
    /// # Safety
    /// The CPU has AES-NI and SSE4.1.
    pub(crate) unsafe fn chain_in<const MODE: u8>(
        t: &RoundTable<'_>,
        iv: &mut [u8; 16],
        data: &mut [u8],
    ) {
        assert!(data.len().is_multiple_of(16), "whole blocks");
        // SAFETY: the caller's guarantee.
        by_rounds!(t, NR => unsafe { sequential::<NR, MODE>(t.enc, iv, data) })
    }

    pub(crate) const CFB: u8 = 0;
    pub(crate) const OFB: u8 = 1;
    pub(crate) const CBC: u8 = 2;

    #[target_feature(enable = "aes,sse4.1")]
    fn encrypt_one<const NR: usize>(enc: &[[u8; 16]; 15], block: &mut [u8; 16]) {
        let mut x = _mm_xor_si128(load128(block), load128(&enc[0]));
        for k in &enc[1..NR] {
            x = _mm_aesenc_si128(x, load128(k));
        }
        x = _mm_aesenclast_si128(x, load128(&enc[NR]));
        store128(block, x);
    }

    #[target_feature(enable = "aes,sse4.1")]
    fn sequential<const NR: usize, const MODE: u8>(
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

    // ---------------------------------------------------------------------------------------
    // AES-GCM.

    /// AES-GCM encryption in place; returns the tag. `data` is at most
    /// [`crate::vaes::GCM_MAX`] bytes (checked by the caller).
    pub(crate) fn gcm_encrypt(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
    ) -> [u8; 16] {
        assert!(data.len() as u64 <= crate::vaes::GCM_MAX);
        // SAFETY: as in `ecb_encrypt` (a `GcmKeys` holds a `Keys`).
        on_width!(keys.aes, m, NR => unsafe { m::gcm::<NR>(keys, nonce, aad, None, data, false) })
    }

    /// AES-GCM decryption in place: whether the tag matches. When it does not, the data is
    /// encrypted back, so a refused message is left as it was.
    pub(crate) fn gcm_decrypt(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        data: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        if data.len() as u64 > crate::vaes::GCM_MAX {
            return false;
        }
        // SAFETY: as in `gcm_encrypt`.
        let expected = on_width!(keys.aes, m, NR => unsafe { m::gcm::<NR>(keys, nonce, aad, None, data, true) });
        if !crate::aes::tags_equal(&expected, tag) {
            ctr_apply(&keys.aes, &gcm_counter(nonce), data);
            return false;
        }
        true
    }

    /// AES-GCM decryption from `src` into `dst` (same length, at most
    /// [`crate::vaes::GCM_MAX`] bytes: both checked by the caller, `crate::aes::Gcm::decrypt_to`,
    /// which also wipes `dst` when the tag does not match), stitched (the width's `gcm`): no copy
    /// first. Whether the tag matches.
    pub(crate) fn gcm_decrypt_to(
        keys: &GcmKeys,
        nonce: &[u8; 12],
        aad: &[u8],
        src: &[u8],
        dst: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        debug_assert!(src.len() == dst.len() && src.len() as u64 <= crate::vaes::GCM_MAX);
        // SAFETY: as in `gcm_encrypt`.
        let expected = on_width!(keys.aes, m, NR => unsafe {
            m::gcm::<NR>(keys, nonce, aad, Some(src), dst, true)
        });
        crate::aes::tags_equal(&expected, tag)
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

    /// FIPS-197 Appendix A key expansion (first, an inner and the last round key), and
    /// Appendix C.3 (AES-256 of 00112233..ff) through both widths' ECB.
    #[test]
    fn key_expansion_and_ecb_match_fips_197() {
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
        let mut ran = 0;
        for width in [Width::Xmm, Width::Ymm] {
            if !width.supported() {
                eprintln!("skipped {width:?}: not on this CPU");
                continue;
            }
            ran += 1;
            for (key, r, round_r, last) in cases {
                let keys = Keys::new(&hex(key), width).unwrap();
                let rk = keys.encryption_keys();
                assert_eq!(rk.len(), hex(key).len() / 4 + 7);
                assert_eq!(rk[0].to_vec(), hex(key)[..16].to_vec(), "{key}");
                assert_eq!(rk[r].to_vec(), hex(round_r), "{key} round {r}");
                assert_eq!(rk[rk.len() - 1].to_vec(), hex(last), "{key} last round");
            }
            let key = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
            let keys = Keys::new(&key, width).unwrap();
            // Three copies: a whole register and a partial one for the ymm width.
            let mut data = hex("00112233445566778899aabbccddeeff").repeat(3);
            ecb_encrypt(&keys, &mut data);
            assert_eq!(data, hex("8ea2b7ca516745bfeafc49904b496089").repeat(3));
            ecb_decrypt(&keys, &mut data);
            assert_eq!(data, hex("00112233445566778899aabbccddeeff").repeat(3));
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("aes") {
            assert!(ran > 0, "AES-NI present but no width ran");
        }
    }

    #[test]
    fn wrong_key_lengths_are_refused() {
        for len in [0, 8, 15, 17, 31, 33] {
            assert!(Keys::new(&vec![0u8; len], Width::Xmm).is_none());
            assert!(Keys::new(&vec![0u8; len], Width::Ymm).is_none());
        }
    }
}
