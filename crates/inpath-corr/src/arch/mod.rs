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
//! for those types; `avx2-i16` runs at the AVX2 level only. [`Kernel`] narrows the choice for
//! tests and comparisons.
//!
//! This module is the choice ([`choose`] gives a [`Path`]); the kernels are leaves that never
//! call back here: `tiles` (the `f64` tiles, portable, AVX2 and AVX-512 side by side),
//! `int` (the AVX-512 VNNI / IFMA, AMX and AVX2 `avx2-i8` integer kernels) and `madd16`
//! (`avx2-i16`), over `common` (the [`Isa`] and [`Path`] they are given). `tests` checks
//! what needs the choice; the `corr` integration suite runs every level against the
//! portable kernels.

#![allow(unsafe_code)]

mod common;
mod int;
mod madd16;
#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
mod tiles;

pub(crate) use common::{Isa, Path};
pub(crate) use int::IntAccumulator;
pub(crate) use madd16::Madd16Accumulator;
pub(crate) use tiles::{dispatch, tile, Mid, TileSpec, MAX_NZ, MR};

use crate::DType;
#[cfg(target_arch = "x86_64")]
use inpath_core::isa;
use inpath_core::isa::Level;

/// Which implementation of the kernels runs (the choice itself is made in this module, capped
/// by `INPATH_ISA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kernel {
    /// The fastest the CPU supports: the integer kernels where the CPU has them (AMX, AVX-512
    /// VNNI / IFMA, AVX2 `vpmaddwd` for 8, 16 and 32-bit items), the `f64` tiles at the highest level
    /// (AVX-512, AVX2 + FMA) for the other types, else the portable kernels.
    #[default]
    Auto,
    /// The integer kernels (AVX-512 VNNI / IFMA, AVX2) where the CPU has them, never AMX (for
    /// tests and comparison).
    NoAmx,
    /// The `f64` tile kernels for every type (AVX-512 or AVX2 where available), never the
    /// integer kernels (for tests and comparison).
    Tiles,
    /// The safe portable kernels only (for tests and comparison).
    Portable,
}

impl Kernel {
    /// The kernels this choice runs for `m` streams of `dtype` on this CPU: `amx-int8` (rows of
    /// 64 to 512 bytes of 16-bit integers, 128 to 512 bytes of 8 and 32-bit integers, where the
    /// CPU and OS allow AMX), `avx512-vnni` (8-bit integers), `avx512-ifma` (16 and 32-bit
    /// integers), `avx2-i8` (8-bit integers on AVX2), `avx2-i16` (16 and 32-bit integers on
    /// AVX2), `avx512-f64` / `avx2-f64` (tiles) or
    /// `portable-f64`.
    pub fn name_for(self, dtype: crate::DType, m: usize) -> &'static str {
        self.name_at(inpath_core::isa::Level::Avx512, dtype, m)
    }

    /// [`Kernel::name_for`] with the level capped at `cap` (as `INPATH_ISA` caps it, but for
    /// one engine: [`crate::Corr::with_isa_cap`]); for tests and comparisons.
    #[doc(hidden)]
    pub fn name_at(
        self,
        cap: inpath_core::isa::Level,
        dtype: crate::DType,
        m: usize,
    ) -> &'static str {
        choose(self, dtype, m, cap).name(dtype)
    }
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
    if kernel == Kernel::Auto && amx_chosen(dtype, m, cap) {
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

/// AMX: the most byte streams (M x item width); the byte-pair sums grow with their square.
const AMX_MAX_BYTE_STREAMS: usize = 512;

/// Whether the AMX kernel can run `m` streams of `dtype` here: 8/16/32-bit integers, at most
/// 512 byte streams, a CPU with AMX-INT8 (and the AVX-512 used for packing), and an OS that
/// grants this process the tile state (Linux `arch_prctl(ARCH_REQ_XCOMP_PERM)`, asked once),
/// with the AVX-512 level allowed by `cap`.
pub(crate) fn amx_supported(dtype: DType, m: usize, cap: Level) -> bool {
    matches!(
        dtype,
        DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::U32 | DType::I32
    ) && m * dtype.width() <= AMX_MAX_BYTE_STREAMS
        && avx512_int(DType::U8, cap)
        && amx_granted()
}

/// Whether `Kernel::Auto` takes the AMX kernel for `m` streams of `dtype`: where it can, for
/// rows of 64 bytes or more of 16-bit items and 128 bytes or more of 8 and 32-bit items.
/// Measured in memory with `inpath-bench corr` (one thread): AMX wins on the wider rows, but on
/// 64-byte rows of u8 and u32 packing and transposing cost about what the multiplies save.
pub(crate) fn amx_chosen(dtype: DType, m: usize, cap: Level) -> bool {
    let bytes = m * dtype.width();
    (if dtype.width() == 2 {
        bytes >= 64
    } else {
        bytes >= 128
    }) && amx_supported(dtype, m, cap)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_granted() -> bool {
    static GRANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GRANTED.get_or_init(|| {
        // CPUID.(EAX=7,ECX=0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8.
        let leaf = std::arch::x86_64::__cpuid_count(7, 0);
        if leaf.edx & (3 << 24) != 3 << 24 {
            return false;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: a plain system call with integer arguments; it only changes which extended
        // states this process may use.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        r == 0
    })
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_granted() -> bool {
    false
}
