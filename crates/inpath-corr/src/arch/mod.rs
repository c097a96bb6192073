//! The one place the corr engine picks its kernels for the running CPU.
//!
//! The level is `inpath_core::isa::effective()` (the CPU's x86-64 level capped by
//! `INPATH_ISA`), so `INPATH_ISA=avx2` on an AVX-512 machine runs exactly the kernels an
//! AVX2-only server runs and `INPATH_ISA=portable` the plain-Rust ones. One engine can be
//! capped lower still (`Corr::with_isa_cap`: the tests run every level in one process;
//! `Corr::new` leaves the cap at the top). On top of the level this module checks the extra
//! features each kernel needs (VNNI, VBMI, IFMA, AMX).
//!
//! | level    | 8-bit                         | 16/32-bit                 | other types  |
//! |----------|-------------------------------|---------------------------|--------------|
//! | avx512   | `amx-int8` / `avx512-vnni`    | `amx-int8` / `avx512-ifma`| `avx512-f64` |
//! | avx2     | `avx2-i8` (`vpmaddwd`)        | `avx2-i16` (`vpmaddwd`)   | `avx2-f64`   |
//! | portable | `portable-f64`                | `portable-f64`            | `portable-f64` |
//!
//! An AVX-512 CPU without VNNI (or IFMA) runs the AVX2 8-bit kernel (or the AVX-512 tiles)
//! for those types; `avx2-i16` runs at the AVX2 level only. [`Kernel`] narrows the choice for tests and comparisons.

use crate::kernel::{Isa, Kernel};
use crate::DType;
#[cfg(target_arch = "x86_64")]
use inpath_core::isa;
use inpath_core::isa::Level;

/// Which accumulator and kernels run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// AMX `tdpbuud` on byte streams (8/16/32-bit integers).
    Amx,
    /// AVX-512 VNNI (8-bit) or IFMA (16/32-bit) integer kernels.
    Avx512Int,
    /// AVX2 `vpmaddwd` on pairs of rows (8-bit integers).
    Avx2Int,
    /// AVX2 `vpmaddwd` on pairs of rows of 16-bit digits (16 and 32-bit integers).
    Avx2I16,
    /// The `f64` tile kernels at this level.
    Tiles(Isa),
}

/// The level the kernels may use under `cap`: the CPU's level capped by `INPATH_ISA` and `cap`.
#[cfg(target_arch = "x86_64")]
fn level(cap: Level) -> Level {
    isa::effective().min(cap)
}

/// The level the `f64` tiles run at for `kernel` under `cap`.
pub(crate) fn tile_isa(kernel: Kernel, cap: Level) -> Isa {
    if kernel == Kernel::Portable {
        return Isa::Portable;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let lv = level(cap);
        // The x86-64-v4 level implies avx512f/dq and fma; checked again so the `unsafe`
        // kernels rest on the features they enable.
        if lv >= Level::Avx512 && has!("avx512f") && has!("avx512dq") && has!("fma") {
            return Isa::Avx512;
        }
        if lv >= Level::Avx2 && has!("avx2") && has!("fma") {
            return Isa::Avx2;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cap;
    Isa::Portable
}

/// Whether the AVX-512 integer kernels (VNNI for 8-bit, IFMA for 16/32-bit) can run `dtype`
/// under `cap`.
pub(crate) fn avx512_int(dtype: DType, cap: Level) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if level(cap) < Level::Avx512 {
            return false;
        }
        let base = has!("avx512f") && has!("avx512bw") && has!("avx512vl");
        match dtype {
            DType::U8 | DType::I8 => base && has!("avx512vnni") && has!("avx512vbmi"),
            DType::U16 | DType::I16 | DType::U32 | DType::I32 => base && has!("avx512ifma"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, cap);
        false
    }
}

/// Whether the AVX2 integer kernel can run `dtype` (8-bit integers) under `cap`.
pub(crate) fn avx2_int(dtype: DType, cap: Level) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(dtype, DType::U8 | DType::I8)
            && level(cap) >= Level::Avx2
            && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, cap);
        false
    }
}

/// Whether the AVX2 digit kernel (`avx2-i16`) can run `dtype` (16 and 32-bit integers) under
/// `cap`.
pub(crate) fn avx2_i16(dtype: DType, cap: Level) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Only at the AVX2 level: an AVX-512 CPU without IFMA keeps the AVX-512 tiles (not
        // measured against this kernel); capped to AVX2 (`INPATH_ISA=avx2`, or a cap), an
        // AVX-512 CPU runs it like an AVX2-only one.
        matches!(dtype, DType::U16 | DType::I16 | DType::U32 | DType::I32)
            && level(cap) == Level::Avx2
            && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dtype, cap);
        false
    }
}

/// The path `kernel` takes for `m` streams of `dtype` on this CPU, at most at level `cap`
/// (`Level::Avx512`: whatever the CPU and `INPATH_ISA` allow).
pub(crate) fn choose(kernel: Kernel, dtype: DType, m: usize, cap: Level) -> Path {
    if kernel == Kernel::Auto && crate::intkernel::amx_chosen(dtype, m, cap) {
        return Path::Amx;
    }
    if matches!(kernel, Kernel::Auto | Kernel::NoAmx) {
        if avx512_int(dtype, cap) {
            return Path::Avx512Int;
        }
        if avx2_int(dtype, cap) {
            return Path::Avx2Int;
        }
        if avx2_i16(dtype, cap) {
            return Path::Avx2I16;
        }
    }
    Path::Tiles(tile_isa(kernel, cap))
}

impl Path {
    /// The kernel's name in reports.
    pub(crate) fn name(self, dtype: DType) -> &'static str {
        match self {
            Path::Amx => "amx-int8",
            Path::Avx512Int if dtype.width() == 1 => "avx512-vnni",
            Path::Avx512Int => "avx512-ifma",
            Path::Avx2Int => "avx2-i8",
            Path::Avx2I16 => "avx2-i16",
            Path::Tiles(Isa::Portable) => "portable-f64",
            #[cfg(target_arch = "x86_64")]
            Path::Tiles(Isa::Avx2) => "avx2-f64",
            #[cfg(target_arch = "x86_64")]
            Path::Tiles(Isa::Avx512) => "avx512-f64",
        }
    }
}
