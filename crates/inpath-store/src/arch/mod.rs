//! The one place the store picks its Hamming distance kernels for the running CPU.
//!
//! The level is `inpath_core::isa::effective()` (the CPU's x86-64 level capped by
//! `INPATH_ISA`), so `INPATH_ISA=avx2` on an AVX-512 machine runs exactly the kernel an
//! AVX2-only server runs and `INPATH_ISA=portable` the plain-Rust one. On top of the level
//! this module checks the features each kernel needs (POPCNT, AVX2, AVX-512 VPOPCNTDQ).
//!
//! | level    | kernel ([`HammingKernel`])        | per 64-bit word and query                      |
//! |----------|-----------------------------------|------------------------------------------------|
//! | avx512   | `avx512-vpopcntdq` (if the CPU has VPOPCNTDQ, else `avx2`) | `vpxorq`, `vpopcntq`, `vpaddq` on 8 words |
//! | avx2     | `avx2` (`vpshufb` nibble table, `vpsadbw` every 31 vectors) | 4 words per vector |
//! | avx2     | `popcnt` (the portable loop compiled with POPCNT; for comparison) | `xor`, `popcnt`, `add` |
//! | portable | `portable` (`u64::count_ones`, bit tricks without POPCNT) | |
//!
//! Every kernel computes, for a run of items and a block of at most [`QUERY_BLOCK`] queries,
//! all item-query distances, reading each item word once for the whole block (the query words
//! stay in L1/L2). The words past the last whole vector and the bytes past the last whole word
//! are counted with scalar code, so any item size works. The `unsafe` code is the SIMD kernels
//! alone; each has a `// SAFETY:` note, and the tests compare every kernel this CPU can run
//! with the scalar [`crate::hamming::distance`].

use crate::hamming::QUERY_BLOCK;
use std::sync::OnceLock;

/// A Hamming distance kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HammingKernel {
    /// Plain Rust: 64-bit XOR and `u64::count_ones` (any architecture).
    Portable,
    /// The portable loop compiled with POPCNT (x86-64, the AVX2 level).
    Popcnt,
    /// AVX2: `vpshufb` nibble-table popcount, byte counts summed with `vpsadbw`.
    Avx2,
    /// AVX-512 VPOPCNTDQ: `vpopcntq` on 512-bit vectors.
    Avx512,
}

impl HammingKernel {
    /// Every kernel, lowest level first.
    pub const ALL: [HammingKernel; 4] = [
        HammingKernel::Portable,
        HammingKernel::Popcnt,
        HammingKernel::Avx2,
        HammingKernel::Avx512,
    ];

    /// The kernel's name in reports (`portable`, `popcnt`, `avx2`, `avx512-vpopcntdq`).
    pub fn name(self) -> &'static str {
        match self {
            HammingKernel::Portable => "portable",
            HammingKernel::Popcnt => "popcnt",
            HammingKernel::Avx2 => "avx2",
            HammingKernel::Avx512 => "avx512-vpopcntdq",
        }
    }

    /// Parses a name as [`HammingKernel::name`] gives it (`avx512` too).
    pub fn parse(s: &str) -> Option<HammingKernel> {
        match s.trim().to_ascii_lowercase().as_str() {
            "portable" => Some(HammingKernel::Portable),
            "popcnt" => Some(HammingKernel::Popcnt),
            "avx2" => Some(HammingKernel::Avx2),
            "avx512" | "avx512-vpopcntdq" => Some(HammingKernel::Avx512),
            _ => None,
        }
    }

    /// Whether this CPU, under the `INPATH_ISA` cap, can run the kernel.
    pub fn runs_here(self) -> bool {
        match self {
            HammingKernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            HammingKernel::Popcnt | HammingKernel::Avx2 => {
                use inpath_core::isa::{effective, Level};
                use std::arch::is_x86_feature_detected as has;
                effective() >= Level::Avx2 && has!("avx2") && has!("popcnt")
            }
            #[cfg(target_arch = "x86_64")]
            HammingKernel::Avx512 => {
                use inpath_core::isa::{effective, Level};
                use std::arch::is_x86_feature_detected as has;
                effective() >= Level::Avx512
                    && has!("avx512f")
                    && has!("avx512vpopcntdq")
                    && has!("popcnt")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kernels this CPU can run under the cap, lowest first (tests compare them all).
    pub fn available() -> Vec<HammingKernel> {
        HammingKernel::ALL
            .into_iter()
            .filter(|k| k.runs_here())
            .collect()
    }

    /// The kernel a search uses: the fastest one that runs here (chosen once).
    pub fn best() -> HammingKernel {
        static BEST: OnceLock<HammingKernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            [HammingKernel::Avx512, HammingKernel::Avx2]
                .into_iter()
                .find(|k| k.runs_here())
                .unwrap_or(HammingKernel::Portable)
        })
    }
}

impl std::fmt::Display for HammingKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Distances of every item in `items` (whole items of `is` bytes) to each of the `qn`
/// queries in `queries` (`qn · is` bytes, `1 ≤ qn ≤ QUERY_BLOCK`): `out[n · qn + j]` is the
/// distance of item `n` to query `j`. `kernel` must run here ([`HammingKernel::runs_here`]);
/// a kernel that does not falls back to the portable one.
pub(crate) fn distances(
    kernel: HammingKernel,
    items: &[u8],
    is: usize,
    queries: &[u8],
    qn: usize,
    out: &mut [u32],
) {
    assert!(is > 0 && (1..=QUERY_BLOCK).contains(&qn));
    assert!(items.len().is_multiple_of(is) && queries.len() == qn * is);
    assert!(out.len() >= items.len() / is * qn);
    macro_rules! by_qn {
        ($f:ident) => {
            match qn {
                1 => $f::<1>(items, is, queries, out),
                2 => $f::<2>(items, is, queries, out),
                3 => $f::<3>(items, is, queries, out),
                4 => $f::<4>(items, is, queries, out),
                5 => $f::<5>(items, is, queries, out),
                6 => $f::<6>(items, is, queries, out),
                7 => $f::<7>(items, is, queries, out),
                _ => $f::<8>(items, is, queries, out),
            }
        };
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        HammingKernel::Popcnt if kernel.runs_here() => by_qn!(popcnt_items),
        #[cfg(target_arch = "x86_64")]
        HammingKernel::Avx2 if kernel.runs_here() => by_qn!(avx2_items),
        #[cfg(target_arch = "x86_64")]
        HammingKernel::Avx512 if kernel.runs_here() => by_qn!(avx512_items),
        _ => by_qn!(portable_items),
    }
}

/// The scalar loop: every item word XORed with each query's word and counted.
#[inline(always)]
fn scalar_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    let words = is / 8;
    let q: [&[u8]; NQ] = std::array::from_fn(|j| &queries[j * is..(j + 1) * is]);
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let mut d = [0u32; NQ];
        for (w, x) in item[..words * 8].chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
            for j in 0..NQ {
                let y = u64::from_le_bytes(q[j][w * 8..w * 8 + 8].try_into().expect("8 bytes"));
                d[j] += (x ^ y).count_ones();
            }
        }
        for (j, d) in d.iter_mut().enumerate() {
            *d += tail(&item[words * 8..], &q[j][words * 8..]);
        }
        out.copy_from_slice(&d);
    }
}

/// Bits that differ in two equal-length byte strings, one byte at a time.
#[inline(always)]
fn tail(a: &[u8], b: &[u8]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// Words `from..` (to the last whole word) and the tail bytes, for one item and one query.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn scalar_rest(item: &[u8], query: &[u8], from: usize) -> u32 {
    let words = item.len() / 8;
    let mut d = 0;
    for w in from..words {
        let x = u64::from_le_bytes(item[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(query[w * 8..w * 8 + 8].try_into().expect("8 bytes"));
        d += (x ^ y).count_ones();
    }
    d + tail(&item[words * 8..], &query[words * 8..])
}

fn portable_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    scalar_items::<NQ>(items, is, queries, out)
}

#[cfg(target_arch = "x86_64")]
fn popcnt_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    // SAFETY: `distances` calls this only when `HammingKernel::Popcnt.runs_here()`, which
    // checked that the CPU has POPCNT.
    unsafe { popcnt_items_tf::<NQ>(items, is, queries, out) }
}

/// [`scalar_items`] compiled with POPCNT, so `count_ones` is one instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn popcnt_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    scalar_items::<NQ>(items, is, queries, out)
}

#[cfg(target_arch = "x86_64")]
fn avx2_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    // SAFETY: `distances` calls this only when `HammingKernel::Avx2.runs_here()`, which
    // checked that the CPU has AVX2 and POPCNT.
    unsafe { avx2_items_tf::<NQ>(items, is, queries, out) }
}

/// AVX2: per 32-byte vector of an item, for each query: XOR, the popcount of each byte by two
/// `vpshufb` lookups in a 16-entry nibble table, added into a byte accumulator per query;
/// every 31 vectors (31 · 8 = 248 < 256, so bytes never overflow) `vpsadbw` folds the bytes
/// into four 64-bit sums. The words past the last whole vector go through POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn avx2_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let vecs = is / 32;
    assert!(queries.len() >= NQ * is);
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let qp = queries.as_ptr();
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let ip = item.as_ptr();
        let mut total = [zero; NQ];
        let mut v = 0;
        while v < vecs {
            let end = (v + 31).min(vecs);
            let mut acc = [zero; NQ];
            while v < end {
                // SAFETY: v < vecs = is / 32, so bytes v·32..v·32+32 lie inside the item
                // (is bytes); unaligned loads.
                let x = unsafe { _mm256_loadu_si256(ip.add(v * 32).cast()) };
                for (j, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: j < NQ and v·32 + 32 ≤ is, so the load lies inside query j
                    // (bytes j·is..(j+1)·is of `queries`, which holds NQ·is, asserted above).
                    let y = unsafe { _mm256_loadu_si256(qp.add(j * is + v * 32).cast()) };
                    let d = _mm256_xor_si256(x, y);
                    let lo = _mm256_and_si256(d, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(d), low);
                    let c =
                        _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
                    *acc = _mm256_add_epi8(*acc, c);
                }
                v += 1;
            }
            for (t, a) in total.iter_mut().zip(acc) {
                *t = _mm256_add_epi64(*t, _mm256_sad_epu8(a, zero));
            }
        }
        for (j, (o, t)) in out.iter_mut().zip(total).enumerate() {
            let s = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256::<1>(t));
            let s = _mm_cvtsi128_si64(_mm_add_epi64(s, _mm_unpackhi_epi64(s, s))) as u64;
            *o = s as u32 + scalar_rest(item, &queries[j * is..(j + 1) * is], vecs * 4);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512_items<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    // SAFETY: `distances` calls this only when `HammingKernel::Avx512.runs_here()`, which
    // checked that the CPU has AVX-512 F, VPOPCNTDQ and POPCNT.
    unsafe { avx512_items_tf::<NQ>(items, is, queries, out) }
}

/// AVX-512 VPOPCNTDQ: per 64-byte vector of an item, for each query: XOR, `vpopcntq`,
/// `vpaddq` into a 64-bit sum per query. The words past the last whole vector go through
/// POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
fn avx512_items_tf<const NQ: usize>(items: &[u8], is: usize, queries: &[u8], out: &mut [u32]) {
    use std::arch::x86_64::*;
    let vecs = is / 64;
    assert!(queries.len() >= NQ * is);
    let qp = queries.as_ptr();
    for (item, out) in items.chunks_exact(is).zip(out.chunks_exact_mut(NQ)) {
        let ip = item.as_ptr();
        let mut acc = [_mm512_setzero_si512(); NQ];
        for v in 0..vecs {
            // SAFETY: v < vecs = is / 64, so bytes v·64..v·64+64 lie inside the item.
            let x = unsafe { _mm512_loadu_si512(ip.add(v * 64).cast()) };
            for (j, acc) in acc.iter_mut().enumerate() {
                // SAFETY: j < NQ and v·64 + 64 ≤ is: inside query j (asserted NQ·is bytes).
                let y = unsafe { _mm512_loadu_si512(qp.add(j * is + v * 64).cast()) };
                *acc = _mm512_add_epi64(*acc, _mm512_popcnt_epi64(_mm512_xor_si512(x, y)));
            }
        }
        for (j, (o, a)) in out.iter_mut().zip(acc).enumerate() {
            let s = _mm512_reduce_add_epi64(a) as u64;
            *o = s as u32 + scalar_rest(item, &queries[j * is..(j + 1) * is], vecs * 8);
        }
    }
}
