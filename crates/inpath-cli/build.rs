//! The `inpath` binary's code layout (Linux, x86-64).
//!
//! The binary holds about 75 MB of machine code and a query runs some 9 MB of it, scattered:
//! Linux maps file-backed code 64 KiB around each page fault, so a process held 40-50 MiB of
//! code resident. `link/symbol-order.txt` (written by `scripts/link_order.py` from traced runs)
//! lists the functions the query paths run, host code first; the linker places them together at
//! the front of `.text`, and the code a query holds falls to about 10 MiB. Symbols the file
//! lists that the binary lacks (a dependency or toolchain changed) are skipped: a stale file
//! costs memory, never correctness.
//!
//! Where the C library can load them (glibc 2.36 or later on the building machine, which
//! runs what it builds), relative relocations are packed (RELR): the dynamic loader then reads
//! about 50 KB of relocations at start-up instead of 5 MB.
//!
//! `INPATH_LINK_LAYOUT=off` builds the binary without either.
use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/symbol-order.txt");
    println!("cargo:rerun-if-env-changed=INPATH_LINK_LAYOUT");
    // Set where the layout is applied: tests/link_layout.rs checks it.
    println!("cargo::rustc-check-cfg=cfg(inpath_link_layout)");
    let var = |name: &str| env::var(name).unwrap_or_default();
    if var("INPATH_LINK_LAYOUT") == "off" {
        return;
    }
    // Rust links x86_64-unknown-linux-gnu with its own lld (since 1.90; the workspace needs
    // 1.94), whose option --symbol-ordering-file is. A build that names another linker is left
    // as it is.
    if var("CARGO_CFG_TARGET_ARCH") != "x86_64"
        || var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || !var("RUSTC_LINKER").is_empty()
        || ["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|flag| var("CARGO_ENCODED_RUSTFLAGS").contains(flag))
    {
        return;
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/symbol-order.txt");
    if !order.exists() {
        return;
    }
    println!("cargo::rustc-cfg=inpath_link_layout");
    // -Xlinker pairs, not -Wl: a comma in the path would split a -Wl argument.
    for arg in [
        "--symbol-ordering-file".to_string(),
        order.display().to_string(),
        "--no-warn-symbol-ordering".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bins=-Xlinker");
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    if var("HOST") == var("TARGET") && glibc_at_least(2, 36) {
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
