//! The `inpath` binary's code layout (see build.rs): the functions `link/symbol-order.txt`
//! lists sit at the front of `.text`, in the listed order, and the file still names the
//! binary's functions (it goes stale when an edit, a dependency or the toolchain changes the
//! symbols' names; `scripts/link_order.py` rewrites it, `--refresh` after an edit).
#![cfg(inpath_link_layout)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// Text symbols of the binary and their addresses, from `nm` (binutils, which the C compiler
/// Rust links with comes with).
fn text_symbols(binary: &str) -> HashMap<String, u64> {
    let out = Command::new("nm")
        .args(["--defined-only", binary])
        .output()
        .expect("nm (binutils) runs");
    assert!(out.status.success(), "nm failed on {binary}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (address, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            matches!(kind, "t" | "T")
                .then(|| Some((name.to_string(), u64::from_str_radix(address, 16).ok()?)))?
        })
        .collect()
}

#[test]
fn listed_functions_lead_the_text_in_order() {
    let list_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("link/symbol-order.txt");
    let list = std::fs::read_to_string(&list_path).expect("symbol-order.txt");
    let listed: Vec<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    let symbols = text_symbols(env!("CARGO_BIN_EXE_inpath"));
    let found: Vec<u64> = listed
        .iter()
        .filter_map(|name| symbols.get(*name).copied())
        .collect();
    // A listed function whose code is identical to one listed before it is folded into that
    // one (the linker keeps one copy, at the first's place): it is where the list put it.
    let mut seen = std::collections::HashSet::new();
    let placed: Vec<u64> = found.iter().copied().filter(|a| seen.insert(*a)).collect();
    // The list names this build's functions. An edit to the engines renames a few hundred of
    // them (a new impl block renumbers the blocks after it; ThinLTO renames the functions it
    // promoted from a changed codegen unit), and an offloaded host then holds 3 MiB more code
    // (Q2: 19.1 MiB instead of 16.6, Zen 3); `--refresh` maps the new names in seconds. A
    // dependency or toolchain change renames them all: that needs the traces again.
    let missing = listed.len() - found.len();
    assert!(
        missing * 100 <= listed.len(),
        "{missing} of the {} functions in {} are not in the binary (1 % may be): after an edit, \
         `python3 scripts/link_order.py --refresh` and rebuild; after a dependency or toolchain \
         change, regenerate it with `python3 scripts/link_order.py` (after `cargo build \
         --release -p inpath-cli`)",
        listed.len(),
        list_path.display()
    );
    // In the listed order, one after another.
    let out_of_order = placed.windows(2).filter(|w| w[1] <= w[0]).count();
    assert_eq!(
        out_of_order, 0,
        "the linker did not follow the listed order"
    );
    // At the front of the text: next to no unlisted function below the first listed one, and
    // none among them (an unlisted name at a listed one's address is the same code: identical
    // functions are folded into one).
    let first = placed[0];
    let last = *placed.last().unwrap();
    let listed_at: std::collections::HashSet<u64> = placed.iter().copied().collect();
    let between = symbols
        .values()
        .filter(|&&address| address > first && address < last && !listed_at.contains(&address))
        .count();
    let below = symbols.values().filter(|&&address| address < first).count();
    assert!(
        below < 50,
        "{below} functions lie before the first listed one"
    );
    assert_eq!(between, 0, "unlisted functions lie among the listed ones");
}
