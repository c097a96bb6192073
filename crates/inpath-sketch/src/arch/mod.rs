//! The one place the sketch engine picks its kernel for the running CPU.
//!
//! The kernel hashes a batch of items, then updates each sketch row in its own pass. It is
//! written once, generically, and compiled three times: for the baseline target
//! (`portable`), for x86-64-v3 (`avx2`: AVX2, BMI2, LZCNT) and for x86-64-v4 (`avx512`).
//! [`chosen_level`] is the level it runs at: the CPU's, capped by `INPATH_ISA` (read once);
//! [`run`] runs it there and `run_at` at a given level. A sketch can be pinned to another
//! supported level (`Sketch::set_kernel_level`, a test hook), so one test process compares
//! every level against the portable one for every item kind, hash mode and layout (the
//! `sketch` integration suite). On other architectures only the portable version exists.
//!
//! The kernel's files are leaves that never call back here: `update` (the three compiled
//! versions of one call), over `rows` (Count-Min and Fast-AGMS rows) and `hll`
//! (HyperLogLog ranks and registers), over `common` (the job, its items, the state arrays,
//! the row layout and [`BATCH`]).
#![allow(unsafe_code)]

mod common;
mod hll;
mod rows;
mod update;

pub use common::BATCH;
pub(crate) use common::{Items, Job, Layout, Target};

/// The CPU levels with their own compiled kernel: `Portable` (the target's baseline; x86-64:
/// SSE2), `Avx2` (x86-64-v3: AVX2, BMI1/2, LZCNT, FMA) and `Avx512` (x86-64-v4) — the levels of
/// `inpath_core::isa`.
pub use inpath_core::isa::Level;

/// The best level this CPU supports.
pub fn detected_level() -> Level {
    inpath_core::isa::detected()
}

/// Every level this CPU supports up to the `INPATH_ISA` cap (for tests comparing them).
pub fn supported_levels() -> Vec<Level> {
    Level::ALL
        .into_iter()
        .filter(|&l| l <= chosen_level())
        .collect()
}

/// The level the kernel runs at: the CPU's, capped by `INPATH_ISA=portable|avx2|avx512` (and
/// the older `INPATH_KERNEL=baseline|v3`, still honoured).
pub fn chosen_level() -> Level {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let legacy = match std::env::var("INPATH_KERNEL").as_deref() {
            Ok("baseline") => Level::Portable,
            Ok("v3") => Level::Avx2,
            _ => Level::Avx512,
        };
        inpath_core::isa::effective().min(legacy)
    })
}

/// The name of the kernel that runs here (`portable`, `avx2`, `avx512`).
pub fn kernel_name() -> &'static str {
    chosen_level().name()
}

/// Runs the kernel at [`chosen_level`].
/// Returns the min and max of integer items.
pub(crate) fn run(target: Target<'_>, job: &Job, items: Items<'_>) -> Option<(u64, u64)> {
    run_at(chosen_level(), target, job, items)
}

/// Runs the kernel compiled for `level`, which must be supported (else the baseline runs).
pub(crate) fn run_at(
    level: Level,
    target: Target<'_>,
    job: &Job,
    items: Items<'_>,
) -> Option<(u64, u64)> {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && detected_level() >= Level::Avx512 {
            // SAFETY: the CPU supports every feature `update::v4` is compiled for (checked above).
            return unsafe { update::v4(target, job, items) };
        }
        if level >= Level::Avx2 && detected_level() >= Level::Avx2 {
            // SAFETY: the CPU supports every feature `update::v3` is compiled for (checked above).
            return unsafe { update::v3(target, job, items) };
        }
    }
    let _ = level;
    update::portable(target, job, items)
}
