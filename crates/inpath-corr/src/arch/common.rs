//! The dispatch types the choice in [`super`] gives and the kernels take: the level the `f64`
//! tiles run at and the path an engine's rows take.

use crate::DType;

/// A kernel level resolved against the running CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Safe portable Rust.
    Portable,
    /// AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-512 F/DQ and FMA.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

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
