//! `inpath store` as a process in a temp dir: put, ls, read, rm, grep (against grep), nn, and
//! the bad inputs with their messages and exit status.

use std::path::Path;
use std::process::{Command, Output};

fn inpath(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_inpath"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run inpath")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = inpath(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let out = inpath(dir, args);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail");
    String::from_utf8(out.stderr).unwrap()
}

fn text() -> Vec<u8> {
    let mut x = 7u64;
    let words: [&str; 6] = ["hay", "needle", "aaaa", "stack", "a", "needles"];
    let mut out = String::new();
    while out.len() < 100_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.push_str(words[(x >> 60) as usize % 6]);
        out.push(if (x >> 50).is_multiple_of(5) {
            '\n'
        } else {
            ' '
        });
    }
    out.into_bytes()
}

#[test]
fn put_ls_grep_read_rm() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("t.txt"), text()).unwrap();
    let out = ok(d, &["store", "put", "S", "t.txt", "--page-size", "1KiB"]);
    assert!(out.starts_with("handle 1@1  t.txt  "), "{out}");
    let ls: serde_json::Value =
        serde_json::from_str(&ok(d, &["store", "ls", "S", "--json"])).unwrap();
    assert_eq!(ls[0]["handle"], 1);
    assert_eq!(ls[0]["size"], text().len());
    assert_eq!(ls[0]["page_size"], 1024);

    // Offsets as grep -b -o -F prints them ("needle" never overlaps itself).
    for threads in ["1", "2", "5"] {
        let ours = ok(
            d,
            &["store", "grep", "S", "1", "needle", "--threads", threads],
        );
        let count = ok(
            d,
            &[
                "store",
                "grep",
                "S",
                "1",
                "needle",
                "--count",
                "--threads",
                threads,
            ],
        );
        match Command::new("grep")
            .args(["-b", "-o", "-F", "needle", "t.txt"])
            .current_dir(d)
            .output()
        {
            Ok(g) => {
                assert_eq!(
                    ours,
                    String::from_utf8(g.stdout).unwrap(),
                    "threads {threads}"
                );
                let c = Command::new("grep")
                    .args(["-c", "-F", "needle", "t.txt"])
                    .current_dir(d)
                    .output()
                    .unwrap();
                assert_eq!(count, String::from_utf8(c.stdout).unwrap());
            }
            Err(e) => eprintln!("skipped the grep comparison: cannot run grep: {e}"),
        }
    }
    // Regex output: OFFSET:MATCH.
    let re = ok(
        d,
        &[
            "store",
            "grep",
            "S",
            "1",
            "ne+dles?",
            "--regex",
            "--threads",
            "2",
        ],
    );
    if let Ok(g) = Command::new("grep")
        .args(["-b", "-o", "-E", "ne+dles?", "t.txt"])
        .current_dir(d)
        .output()
    {
        assert_eq!(re, String::from_utf8(g.stdout).unwrap());
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(d, &["store", "grep", "S", "1", "aaaa", "--json"])).unwrap();
    assert_eq!(json["kind"], "literal");
    assert!(json["matches"].as_u64().unwrap() > 0);

    // read: a range, and the whole file to a file.
    let part = ok(
        d,
        &[
            "store", "read", "S", "1", "--offset", "1000", "--length", "50",
        ],
    );
    assert_eq!(part.as_bytes(), &text()[1000..1050]);
    ok(d, &["store", "read", "S", "1@1", "-o", "back.txt"]);
    assert_eq!(std::fs::read(d.join("back.txt")).unwrap(), text());

    let out = ok(d, &["store", "rm", "S", "1"]);
    assert!(out.starts_with("removed handle 1@1 (t.txt"), "{out}");
    let err = fails(d, &["store", "read", "S", "1"]);
    assert!(err.contains("unknown handle 1 in store S"), "{err}");
}

#[test]
fn sealed_put_needs_and_uses_the_key_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("t.txt"), text()).unwrap();
    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(d, &["seal", "keygen", "-o", "other.txt"]);
    let err = fails(
        d,
        &["store", "put", "S", "t.txt", "--seal-tier", "aes256-gcm"],
    );
    assert!(
        err.contains("--seal-tier aes256-gcm needs --key-file"),
        "{err}"
    );
    let out = ok(
        d,
        &[
            "store",
            "put",
            "S",
            "t.txt",
            "--seal-tier",
            "aes256-gcm",
            "--compress",
            "zstd",
            "--key-file",
            "k.txt",
        ],
    );
    assert!(out.contains("zstd-1+aes256-gcm"), "{out}");
    let count = ok(
        d,
        &[
            "store",
            "grep",
            "S",
            "1",
            "needle",
            "-c",
            "--key-file",
            "k.txt",
        ],
    );
    let raw = text();
    let lines = raw
        .split(|&b| b == b'\n')
        .filter(|l| l.windows(6).any(|w| w == b"needle"))
        .count();
    assert_eq!(count.trim(), lines.to_string());
    let err = fails(d, &["store", "grep", "S", "1", "needle"]);
    assert!(
        err.contains("is sealed (zstd-1+aes256-gcm); a key file is needed"),
        "{err}"
    );
    let err = fails(
        d,
        &[
            "store",
            "read",
            "S",
            "1",
            "--key-file",
            "other.txt",
            "-o",
            "x",
        ],
    );
    assert!(err.contains("page 0 of handle 1 does not unseal"), "{err}");
    assert!(err.contains("caused by"), "{err}");
    assert!(!d.join("x").exists(), "a failed read leaves no output");
}

#[test]
fn bad_inputs_fail_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("a.txt"), b"first version\n").unwrap();
    ok(d, &["store", "put", "S", "a.txt"]);
    std::fs::write(d.join("a.txt"), b"second version\n").unwrap();
    let out = ok(d, &["store", "put", "S", "a.txt"]);
    assert!(out.starts_with("handle 1@2 "), "{out}");

    let err = fails(d, &["store", "read", "S", "1@1"]);
    assert!(
        err.contains("stale handle 1@1: the store holds generation 2"),
        "{err}"
    );
    let err = fails(d, &["store", "read", "S", "x1"]);
    assert!(err.contains("\"x1\" is not a handle"), "{err}");
    let err = fails(
        d,
        &[
            "store", "read", "S", "1", "--offset", "10", "--length", "10",
        ],
    );
    assert!(
        err.contains("range 10..20 of handle 1 is past the end of the file (15 bytes)"),
        "{err}"
    );
    let err = fails(d, &["store", "grep", "S", "2", "x"]);
    assert!(err.contains("unknown handle 2"), "{err}");
    let err = fails(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "4",
            "--queries",
            "a.txt",
        ],
    );
    assert!(
        err.contains("queries = 15 bytes is out of range: a non-zero multiple of the item size"),
        "{err}"
    );
    std::fs::write(d.join("q4.bin"), b"abcd").unwrap();
    let err = fails(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "4",
            "--queries",
            "q4.bin",
        ],
    );
    assert!(
        err.contains("item size = 4 is out of range: a divisor of the handle's size (15 bytes)"),
        "{err}"
    );
    let err = fails(d, &["store", "put", "S", "missing.txt"]);
    assert!(err.contains("cannot read missing.txt"), "{err}");
    let err = fails(d, &["store", "ls", "nowhere"]);
    assert!(err.contains("nowhere is not an inpath store"), "{err}");

    // A damaged catalog.
    let cat = d.join("S/catalog");
    let mut bytes = std::fs::read(&cat).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&cat, &bytes).unwrap();
    let err = fails(d, &["store", "ls", "S"]);
    assert!(
        err.contains("the catalog S/catalog is damaged: CRC-32"),
        "{err}"
    );
    let err = fails(d, &["store", "put", "S", "a.txt"]);
    assert!(err.contains("is damaged"), "{err}");
}

#[test]
fn nn_finds_planted_neighbours() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // 1000 items of 16 bytes; item 700 equals the query but for one bit, item 3 for two bits.
    let mut items = vec![0u8; 16_000];
    let mut x = 1u64;
    for b in items.iter_mut() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        *b = (x >> 56) as u8;
    }
    let query: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(29)).collect();
    items[700 * 16..701 * 16].copy_from_slice(&query);
    items[700 * 16] ^= 1;
    items[3 * 16..4 * 16].copy_from_slice(&query);
    items[3 * 16 + 5] ^= 0x81;
    std::fs::write(d.join("items.bin"), &items).unwrap();
    std::fs::write(d.join("q.bin"), &query).unwrap();
    ok(
        d,
        &["store", "put", "S", "items.bin", "--page-size", "1000"],
    );
    let out = ok(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "16",
            "--queries",
            "q.bin",
            "-k",
            "2",
            "--threads",
            "3",
        ],
    );
    assert_eq!(out, "query 0: 700:1 3:2\n");
    let json: serde_json::Value = serde_json::from_str(&ok(
        d,
        &[
            "store",
            "nn",
            "S",
            "1",
            "--item-size",
            "16",
            "--queries",
            "q.bin",
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(json["neighbours"][0][0]["index"], 700);
    assert_eq!(json["items"], 1000);
}
