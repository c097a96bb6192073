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
//! rounds. The sequential modes (CBC encryption of one chain, CFB encryption, OFB, single
//! blocks) are the one-block AES-NI loops of `common`, for both widths.
//!
//! The kernel bodies are written once, in the `kernels!` macro over a dozen width primitives
//! (load, store, XOR, the AES rounds, counter steps, the previous-block shift, carry-less
//! multiplication); each width module (`xmm`, `ymm`) supplies its primitives and its
//! `target_feature` list, and the macro expands the mode loops inside it, where every
//! primitive inlines. A leaf: it imports only `common` (the key schedule, the GHASH
//! reduction, the CTR split, the CBC lane phases); which width runs is chosen by the
//! dispatcher (`arch`), never here.
//!
//! # Why this module has `unsafe`
//!
//! The intrinsics need `#[target_feature]` functions, which are `unsafe` to call, and 128/256-bit
//! unaligned loads and stores through pointers. A [`Keys`] records the width it was built for
//! and can only be built after a run-time check that the CPU has every feature that width's
//! kernels enable; the safe functions at the bottom of this file call only the width module a
//! `Keys` names. Every pointer access is inside a slice whose bounds are asserted just before it
//! (partial registers go through a stack buffer).
#![allow(unsafe_code)]

use super::common::{
    self, by_rounds, encrypt_block, gcm_counter, gfmul, load128, reduce3, reflect, store128,
    RoundKeys,
};

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
    fn lanes(self) -> usize {
        match self {
            Width::Xmm => 8,
            Width::Ymm => 16,
        }
    }

    /// 128-bit blocks per register.
    fn blocks(self) -> usize {
        match self {
            Width::Xmm => 1,
            Width::Ymm => 2,
        }
    }
}

fn detect_xmm() -> bool {
    // AVX/AVX2 for the three-operand VEX encodings and unaligned memory operands (the kernel
    // runs at the AVX2 level anyway).
    common::aes_ni()
        && std::arch::is_x86_feature_detected!("avx")
        && std::arch::is_x86_feature_detected!("avx2")
}

fn detect_ymm() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("vaes")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

/// Round keys ([`RoundKeys`]) for one width. Wiped on drop. Holding one proves the CPU has
/// that width's features.
#[derive(Clone)]
pub(crate) struct Keys {
    width: Width,
    rk: RoundKeys,
}

impl std::ops::Deref for Keys {
    type Target = RoundKeys;
    fn deref(&self) -> &RoundKeys {
        &self.rk
    }
}

impl AsRef<RoundKeys> for Keys {
    fn as_ref(&self) -> &RoundKeys {
        &self.rk
    }
}

impl Keys {
    /// Expands a 16-, 24- or 32-byte key for `width`, or `None` when the CPU lacks that width's
    /// features (or the key length is wrong).
    pub(crate) fn new(key: &[u8], width: Width) -> Option<Keys> {
        if !width.supported() {
            return None;
        }
        Some(Keys {
            width,
            rk: RoundKeys::new(key)?,
        })
    }

    /// The width these keys were built for.
    pub(crate) fn width(&self) -> Width {
        self.width
    }
}

/// AES-GCM keys for these kernels: a width's [`Keys`] and the powers `H^1..H^16`.
pub(crate) type GcmKeys = common::GcmKeys<Keys>;

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

/// PSHUFB mask that swaps the low 32-bit word of a counter block between big-endian (as
/// the cipher sees it) and little-endian (so PADDD counts).
const SWAP_LOW_WORD: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13, 12];
/// PSHUFB mask that reverses the bytes of a block (GHASH works on reflected blocks).
const REVERSE: [u8; 16] = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];

// ---------------------------------------------------------------------------------------
// The kernels, written once over the width primitives.

macro_rules! kernels {
    ($feat:literal) => {
        use super::{
            encrypt_block, gfmul, load128, reduce3, reflect, store128, GcmKeys, Keys, REVERSE,
            SWAP_LOW_WORD,
        };
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
                            *lane = load128(s[at..at + 16].try_into().expect("16 bytes"));
                        }
                    }
                    *v = xor(from_lanes(lanes), chain[z]);
                }
                enc_regs::<NR, Z>(&rk, &mut x);
                for (z, v) in x.iter().enumerate() {
                    chain[z] = *v;
                    for (l, lane) in to_lanes(*v).into_iter().enumerate() {
                        if let Some(s) = slices.get_mut(z * B + l) {
                            store128((&mut s[at..at + 16]).try_into().expect("16 bytes"), lane);
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
            let h1 = load128(&keys.h[0]);
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
                y = gfmul(_mm_xor_si128(y, reflect(load128(&padded))), h1);
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
            store128(&mut s, reflect(y));
            let mut j0 = [0u8; 16];
            j0[..12].copy_from_slice(nonce);
            j0[15] = 1;
            encrypt_block(&keys.aes, &mut j0);
            for (t, e) in s.iter_mut().zip(j0) {
                *t ^= e;
            }
            j0.zeroize();
            s
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

// ---------------------------------------------------------------------------------------------
// The safe entry points: each calls the width module its `Keys` was built (and checked) for.

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
    common::ctr_segments(iv, data.len(), |counter, range| {
        // SAFETY: as in `ecb_encrypt`.
        on_width!(keys, m, NR => unsafe {
            m::ctr32::<NR, false>(keys, counter, &[], &mut data[range.clone()])
        })
    });
}

/// As [`ctr_apply`], reading `src` and writing `dst` (of the same length).
pub(crate) fn ctr_apply_to(keys: &Keys, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len());
    common::ctr_segments(iv, src.len(), |counter, range| {
        // SAFETY: as in `ecb_encrypt`.
        on_width!(keys, m, NR => unsafe {
            m::ctr32::<NR, true>(keys, counter, &src[range.clone()], &mut dst[range.clone()])
        })
    });
}

/// CBC decryption of whole blocks in place; `iv` becomes the last ciphertext block.
pub(crate) fn cbc_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: as in `ecb_encrypt`.
    common::chained_decrypt(
        iv,
        data,
        |iv, data| on_width!(keys, m, NR => unsafe { m::chained::<NR, true>(keys, iv, data) }),
    );
}

/// CFB-128 decryption of whole blocks in place; `iv` becomes the last ciphertext block.
pub(crate) fn cfb_decrypt(keys: &Keys, iv: &mut [u8; 16], data: &mut [u8]) {
    // SAFETY: as in `ecb_encrypt`.
    common::chained_decrypt(
        iv,
        data,
        |iv, data| on_width!(keys, m, NR => unsafe { m::chained::<NR, false>(keys, iv, data) }),
    );
}

/// CBC-encrypts independent pages in place, [`Width::lanes`] side by side. Each lane is
/// `(iv, data)` with `data` whole blocks; lanes may differ in length. Each `iv` becomes the
/// lane's last ciphertext block.
pub(crate) fn cbc_encrypt_lanes(keys: &Keys, lanes: &mut [([u8; 16], &mut [u8])]) {
    let b = keys.width.blocks();
    for group in lanes.chunks_mut(keys.width.lanes()) {
        common::cbc_phases(group, |chains, slices, steps| {
            let regs = slices.len().div_ceil(b);
            // SAFETY: as in `ecb_encrypt`.
            on_width!(keys, m, NR => unsafe {
                match regs {
                    1 => m::cbc_phase::<NR, 1>(keys, chains, slices, steps),
                    2 => m::cbc_phase::<NR, 2>(keys, chains, slices, steps),
                    3 | 4 => m::cbc_phase::<NR, 4>(keys, chains, slices, steps),
                    _ => m::cbc_phase::<NR, 8>(keys, chains, slices, steps),
                }
            })
        });
    }
}

// ---------------------------------------------------------------------------------------------
// AES-GCM: the tag computed over `aad` and the ciphertext; the dispatcher checks the lengths
// and the tag, and undoes a refused in-place decryption.

/// AES-GCM encryption in place; returns the tag. `data` is at most [`common::GCM_MAX`] bytes.
pub(crate) fn gcm_encrypt(
    keys: &GcmKeys,
    nonce: &[u8; 12],
    aad: &[u8],
    data: &mut [u8],
) -> [u8; 16] {
    assert!(data.len() as u64 <= common::GCM_MAX);
    // SAFETY: as in `ecb_encrypt` (a `GcmKeys` holds a `Keys`).
    on_width!(keys.aes, m, NR => unsafe { m::gcm::<NR>(keys, nonce, aad, None, data, false) })
}

/// AES-GCM decryption in place, stitched; returns the tag computed over `aad` and the
/// ciphertext. `data` is at most [`common::GCM_MAX`] bytes.
pub(crate) fn gcm_decrypt(
    keys: &GcmKeys,
    nonce: &[u8; 12],
    aad: &[u8],
    data: &mut [u8],
) -> [u8; 16] {
    assert!(data.len() as u64 <= common::GCM_MAX);
    // SAFETY: as in `gcm_encrypt`.
    on_width!(keys.aes, m, NR => unsafe { m::gcm::<NR>(keys, nonce, aad, None, data, true) })
}

/// AES-GCM decryption from `src` into `dst` (same length, at most [`common::GCM_MAX`] bytes),
/// stitched (the width's `gcm`): no copy first. Returns the tag computed over `aad` and `src`.
pub(crate) fn gcm_decrypt_to(
    keys: &GcmKeys,
    nonce: &[u8; 12],
    aad: &[u8],
    src: &[u8],
    dst: &mut [u8],
) -> [u8; 16] {
    assert!(src.len() == dst.len() && src.len() as u64 <= common::GCM_MAX);
    // SAFETY: as in `gcm_encrypt`.
    on_width!(keys.aes, m, NR => unsafe { m::gcm::<NR>(keys, nonce, aad, Some(src), dst, true) })
}
