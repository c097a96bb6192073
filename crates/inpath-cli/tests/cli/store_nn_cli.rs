//! `inpath store index` and `inpath store nn --lsh` as processes, locally and through
//! `inpath store serve`: planted neighbours found, the index's errors (missing, stale,
//! damaged, parameters out of range) with exit status 1 and a message naming the fix.

use crate::common::{fails, inpath, ok, Server};
use std::path::Path;

/// 2000 items of 64 bytes; query 0 is item 700 with 3 bits flipped, query 1 is item 5.
fn data(d: &Path) {
    let mut items = vec![0u8; 2000 * 64];
    let mut x = 1u64;
    for b in items.iter_mut() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        *b = (x >> 56) as u8;
    }
    let mut q = items[700 * 64..701 * 64].to_vec();
    q[0] ^= 1;
    q[33] ^= 0x82;
    q.extend_from_slice(&items[5 * 64..6 * 64]);
    std::fs::write(d.join("items.bin"), &items).unwrap();
    std::fs::write(d.join("q.bin"), &q).unwrap();
}

#[test]
fn index_and_lsh_search_locally_and_remotely() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    data(d);
    ok(d, &["store", "put", "S", "items.bin"]);
    let nn = |at: &[&str], extra: &[&str]| {
        let mut args = vec!["store", "nn"];
        args.extend(at);
        args.extend(["1", "--item-size", "64", "--queries", "q.bin", "-k", "2"]);
        args.extend(extra);
        ok(d, &args)
    };
    let exact = nn(&["S"], &[]);
    assert!(exact.starts_with("query 0: 700:3 "), "{exact}");
    let e = fails(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "64",
            "--queries",
            "q.bin",
            "--lsh",
        ],
    );
    assert!(
        e.contains("has no LSH index") && e.contains("inpath store index S 1 --item-size 64"),
        "{e}"
    );
    let out = ok(
        d,
        &[
            "store",
            "index",
            "S",
            "1",
            "--item-size",
            "64",
            "--threads",
            "2",
        ],
    );
    assert!(
        out.contains("LSH index of 2,000 items (8 tables of 16 bits)"),
        "{out}"
    );
    assert!(d.join("S/index/1.lsh").exists());
    let lsh = nn(&["S"], &["--lsh"]);
    assert!(lsh.starts_with("query 0: 700:3"), "{lsh}");
    assert!(lsh.contains("query 1: 5:0"), "{lsh}");
    let v: serde_json::Value =
        serde_json::from_str(&nn(&["S"], &["--lsh", "--probe", "1", "--json"])).unwrap();
    let cands = v["lsh"]["candidates"].as_u64().unwrap();
    assert!((2..400).contains(&cands), "{v}");
    assert_eq!(v["lsh"]["bytes_read"].as_u64().unwrap(), cands * 64);
    assert_eq!(v["bytes_scanned"], v["lsh"]["bytes_read"]);

    // The same answers from a server, and an index built through it.
    let server = Server::start(d, &["S"]);
    let a = server.addr.as_str();
    assert_eq!(nn(&["--remote", a], &[]), exact);
    assert_eq!(nn(&["--remote", a], &["--lsh"]), lsh);
    ok(
        d,
        &[
            "store",
            "index",
            "--remote",
            a,
            "1",
            "--item-size",
            "64",
            "--tables",
            "4",
        ],
    );
    let v: serde_json::Value =
        serde_json::from_str(&nn(&["--remote", a], &["--lsh", "--json"])).unwrap();
    assert_eq!(v["lsh"]["tables"], 4);
    assert_eq!(v["neighbours"][1][0]["index"], 5);
}

#[test]
fn index_errors_name_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    data(d);
    ok(d, &["store", "put", "S", "items.bin"]);
    let index = |extra: &[&str]| {
        let mut args = vec!["store", "index", "S", "1"];
        args.extend(extra);
        inpath(d, &args)
    };
    for (extra, want) in [
        (
            &["--item-size", "64", "--tables", "0"][..],
            "LSH tables = 0 is out of range: 1 to 64",
        ),
        (&["--item-size", "64", "--tables", "65"][..], "1 to 64"),
        (
            &["--item-size", "64", "--bits", "33"][..],
            "LSH bits = 33 is out of range: 1 to 32",
        ),
        (&["--item-size", "1", "--bits", "9"][..], "1 to 8"),
        (&["--item-size", "48"][..], "a divisor of the handle's size"),
        (&["--item-size", "0"][..], "item size = 0"),
    ] {
        let out = index(extra);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "{extra:?}: {e}");
    }
    ok(d, &["store", "index", "S", "1", "--item-size", "64"]);
    let lsh = |is: &str| {
        fails(
            d,
            &[
                "store",
                "nn",
                "S",
                "1",
                "--item-size",
                is,
                "--queries",
                "q.bin",
                "--lsh",
            ],
        )
    };
    let e = lsh("32");
    assert!(e.contains("built for 64-byte items, not 32"), "{e}");
    let e = fails(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "64",
            "--queries",
            "q.bin",
            "--lsh",
            "--probe",
            "3",
        ],
    );
    assert!(
        e.contains("LSH probe radius = 3 is out of range: 0 to 2"),
        "{e}"
    );
    // Damaged: the error names the file and the command that rebuilds it.
    let path = d.join("S/index/1.lsh");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 4;
    std::fs::write(&path, &bytes).unwrap();
    let e = lsh("64");
    assert!(
        e.contains("1.lsh")
            && e.contains("CRC-32")
            && e.contains("inpath store index S 1 --item-size 64"),
        "{e}"
    );
    // Stale: the handle was put again.
    ok(d, &["store", "index", "S", "1", "--item-size", "64"]);
    ok(d, &["store", "put", "S", "items.bin"]);
    let e = lsh("64");
    assert!(
        e.contains("stale: built for handle 1@1") && e.contains("1@2"),
        "{e}"
    );
    assert!(
        e.contains("rebuild it: inpath store index S 1 --item-size 64"),
        "{e}"
    );
    ok(d, &["store", "index", "S", "1", "--item-size", "64"]);
    ok(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "64",
            "--queries",
            "q.bin",
            "--lsh",
        ],
    );
}
