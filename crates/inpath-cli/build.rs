//! Link settings of the `inpath` binary (Linux, x86-64).
//!
//! Where the C library can load them (glibc 2.36 or later on the building machine, which runs
//! what it builds), relative relocations are packed (RELR): the dynamic loader then reads about
//! 50 KB of relocations at start-up instead of 5 MB, and the relocated pages stay shared. It is
//! one linker flag: it costs no build time and changes no code.
//!
//! `INPATH_PACK_RELOCS=off` builds the binary without it.
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=INPATH_PACK_RELOCS");
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("INPATH_PACK_RELOCS") == "off" {
        return;
    }
    // Rust links x86_64-unknown-linux-gnu with its own lld (since 1.90), which knows the flag.
    // A build that names another linker is left as it is.
    if var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || var("HOST") != var("TARGET")
        || !var("RUSTC_LINKER").is_empty()
        || ["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|flag| var("CARGO_ENCODED_RUSTFLAGS").contains(flag))
    {
        return;
    }
    if glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Xlinker");
        println!("cargo:rustc-link-arg-bins=-zpack-relative-relocs");
    }
}

/// Whether this machine's glibc is at least `major.minor` (`getconf GNU_LIBC_VERSION`:
/// "glibc 2.36"); false where that cannot be told.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.split_whitespace().nth(1) else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    out.status.success() && have >= (major, minor)
}
