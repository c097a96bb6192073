//! The instruction-set cap every engine's kernel dispatch honours.
//!
//! Each engine crate has one `arch` module that picks its kernels for the running CPU once.
//! This module gives them the two things they share: which x86-64 level the CPU reaches
//! ([`detected`]) and how far the user allows them to go ([`cap`], read from the `INPATH_ISA`
//! environment variable). A crate takes `min(detected, cap)` and then its own extra checks
//! (VAES, VNNI, AMX, ...), so `INPATH_ISA=avx2` on an AVX-512 machine runs exactly the code an
//! AVX2-only server runs, and `INPATH_ISA=portable` runs the plain-Rust path that every
//! architecture compiles. Tests and benchmarks use it to cover every path on one machine.
//!
//! ```
//! use inpath_core::isa::{self, Level};
//! let level = isa::effective();
//! assert!(level <= isa::detected());
//! assert_eq!(Level::parse("avx2"), Some(Level::Avx2));
//! ```

use std::sync::OnceLock;

/// The environment variable that caps kernel selection.
pub const ENV: &str = "INPATH_ISA";

/// Kernel levels, lowest first. Each level's kernels may use everything below it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Plain Rust, no architecture-specific intrinsics (written so compilers vectorise it).
    Portable,
    /// x86-64-v3: AVX2, FMA, BMI1/2, LZCNT, POPCNT (plus AES-NI/PCLMULQDQ/VAES where a crate checks).
    Avx2,
    /// x86-64-v4: AVX2 level plus AVX-512 F/BW/CD/DQ/VL (plus IFMA/VNNI/AMX/VAES where checked).
    Avx512,
}

impl Level {
    /// The name used by `INPATH_ISA` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// Parses a level name (case-insensitive; `native`/`auto` mean no cap).
    pub fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "portable" | "scalar" | "generic" | "baseline" => Some(Level::Portable),
            "avx2" | "v3" | "x86-64-v3" => Some(Level::Avx2),
            "avx512" | "avx-512" | "v4" | "x86-64-v4" | "native" | "auto" => Some(Level::Avx512),
            _ => None,
        }
    }

    /// Every level, lowest first.
    pub const ALL: [Level; 3] = [Level::Portable, Level::Avx2, Level::Avx512];
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The highest level this CPU supports (always [`Level::Portable`] off x86-64).
pub fn detected() -> Level {
    static DETECTED: OnceLock<Level> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    use std::arch::is_x86_feature_detected as has;
    let v3 = has!("avx2")
        && has!("fma")
        && has!("bmi1")
        && has!("bmi2")
        && has!("lzcnt")
        && has!("popcnt");
    let v4 = v3
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512cd")
        && has!("avx512dq")
        && has!("avx512vl");
    if v4 {
        Level::Avx512
    } else if v3 {
        Level::Avx2
    } else {
        Level::Portable
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Level {
    Level::Portable
}

/// The cap from `INPATH_ISA` (no cap, i.e. [`Level::Avx512`], when unset or invalid; the CLI
/// rejects an invalid value up front through [`check_env`]).
pub fn cap() -> Level {
    static CAP: OnceLock<Level> = OnceLock::new();
    *CAP.get_or_init(|| match std::env::var(ENV) {
        Ok(v) => Level::parse(&v).unwrap_or(Level::Avx512),
        Err(_) => Level::Avx512,
    })
}

/// `min(detected(), cap())`: the highest level a kernel may use.
pub fn effective() -> Level {
    detected().min(cap())
}

/// Every level this CPU supports up to the cap, lowest first (tests compare them).
pub fn supported() -> Vec<Level> {
    Level::ALL
        .into_iter()
        .filter(|&l| l <= effective())
        .collect()
}

/// A kernel-selection variable with a value that names no choice.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not {expected} (or unset it)")]
pub struct EnvError {
    /// The variable (for example `INPATH_ISA`).
    pub var: &'static str,
    /// Its value.
    pub value: String,
    /// What it takes, in words.
    pub expected: &'static str,
}

/// Checks `INPATH_ISA`: the error names the bad value and the valid ones.
pub fn check_env() -> Result<(), EnvError> {
    match std::env::var(ENV) {
        Ok(v) if Level::parse(&v).is_none() => Err(EnvError {
            var: ENV,
            value: v,
            expected: "a kernel level; use portable, avx2 or avx512",
        }),
        _ => Ok(()),
    }
}

/// Defines a kernel module `$name` whose body is written once in plain Rust and compiled three
/// times: for the baseline target, for x86-64-v3 (AVX2, FMA, BMI) and for x86-64-v4 (AVX-512
/// F/BW/CD/DQ/VL). The module has `at(level, args)`, which runs the body at `level` or the
/// highest level below it the CPU has, and `run(args)`, which runs it at [`effective`].
///
/// The calling module must allow `unsafe_code` (the two compiled twins are `unsafe fn`s with
/// `#[target_feature]`, called only after [`detected`] found their features). The body sees
/// its parent module's items (`use super::*`).
///
/// ```
/// #![allow(unsafe_code)]
/// inpath_core::kernel! {
///     /// The sum of the values.
///     total(values: &[i64]) -> i64 {
///         values.iter().sum()
///     }
/// }
/// use inpath_core::isa::Level;
/// assert_eq!(total::run(&[1, 2, 3]), 6);
/// assert_eq!(total::at(Level::Portable, &[1, 2, 3]), 6);
/// ```
#[macro_export]
macro_rules! kernel {
    ($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        #[allow(unreachable_pub)]
        pub mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[inline(always)]
            fn imp($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
            unsafe fn v3($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(
                enable = "avx512f,avx512bw,avx512cd,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt"
            )]
            unsafe fn v4($($arg: $ty),*) $(-> $ret)? {
                imp($($arg),*)
            }

            /// Runs the kernel at `level`, or the highest level below it the CPU has.
            #[allow(dead_code)]
            pub fn at(level: $crate::isa::Level, $($arg: $ty),*) $(-> $ret)? {
                let level = level.min($crate::isa::detected());
                #[cfg(target_arch = "x86_64")]
                {
                    if level >= $crate::isa::Level::Avx512 {
                        // SAFETY: `detected()` found every feature `v4` enables.
                        return unsafe { v4($($arg),*) };
                    }
                    if level >= $crate::isa::Level::Avx2 {
                        // SAFETY: `detected()` found every feature `v3` enables.
                        return unsafe { v3($($arg),*) };
                    }
                }
                let _ = level;
                imp($($arg),*)
            }

            /// Runs the kernel at the level `INPATH_ISA` and the CPU allow.
            #[allow(dead_code)]
            pub fn run($($arg: $ty),*) $(-> $ret)? {
                at($crate::isa::effective(), $($arg),*)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for l in Level::ALL {
            assert_eq!(Level::parse(l.name()), Some(l));
        }
        assert_eq!(Level::parse("AVX2"), Some(Level::Avx2));
        assert_eq!(Level::parse("sse9"), None);
    }

    #[test]
    fn effective_never_exceeds_detected() {
        assert!(effective() <= detected());
        assert_eq!(supported().first(), Some(&Level::Portable));
        assert_eq!(supported().last(), Some(&effective()));
    }
}
