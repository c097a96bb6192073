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
//!
//! This module is the choice ([`HammingKernel::runs_here`], [`HammingKernel::best`]) and the
//! call ([`distances`]); the kernels themselves are the leaf `popcount`, every vector kernel
//! beside the portable loop it must equal.

mod popcount;

use popcount::portable_items;
#[cfg(target_arch = "x86_64")]
use popcount::{avx2_items, avx512_items, popcnt_items};
use std::sync::OnceLock;

/// Queries compared with an item in one pass over it.
pub const QUERY_BLOCK: usize = 8;

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
