//! `inpath store` as a process in a temp dir: put, ls, read, rm, grep (against grep), nn, and
//! the bad inputs with their messages and exit status.

use crate::common::{fails, ok, raw_call, Server};
use inpath_testkit::diff::assert_same_text;
use std::process::Command;

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
                assert_same_text(
                    &format!("grep -b -o against GNU grep, threads {threads}"),
                    &String::from_utf8(g.stdout).unwrap(),
                    &ours,
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
        assert_same_text(
            "grep --regex against GNU grep -E",
            &String::from_utf8(g.stdout).unwrap(),
            &re,
        );
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

    // The name the file was put under stands for its handle, in every verb.
    let by_name = ok(d, &["store", "grep", "S", "t.txt", "needle", "--count"]);
    assert_eq!(
        by_name,
        ok(d, &["store", "grep", "S", "1", "needle", "--count"])
    );
    let part_by_name = ok(
        d,
        &[
            "store", "read", "S", "t.txt", "--offset", "1000", "--length", "50",
        ],
    );
    assert_eq!(part_by_name, part);
    // A pattern may begin with `-`, given plainly or after `--`, flags before or after it.
    std::fs::write(d.join("dash.txt"), b"a -x b\n-x\nfoo\n").unwrap();
    ok(d, &["store", "put", "S", "dash.txt"]);
    assert_eq!(
        ok(d, &["store", "grep", "S", "dash.txt", "-x"]),
        "2:-x\n7:-x\n"
    );
    assert_eq!(
        ok(d, &["store", "grep", "S", "dash.txt", "--", "-x"]),
        "2:-x\n7:-x\n"
    );
    assert_eq!(
        ok(d, &["store", "grep", "S", "dash.txt", "-c", "-x"]).trim(),
        "2"
    );
    assert_eq!(
        ok(d, &["store", "grep", "-c", "S", "dash.txt", "-x"]).trim(),
        "2"
    );
    ok(d, &["store", "rm", "S", "dash.txt"]);
    let err = fails(d, &["store", "grep", "S", "nope.txt", "needle"]);
    assert!(
        err.contains("no file named \"nope.txt\"") && err.contains("store ls"),
        "{err}"
    );

    let out = ok(d, &["store", "rm", "S", "t.txt"]);
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
    assert!(err.contains("no file named \"x1\""), "{err}");
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

#[test]
fn a_served_store_answers_with_results_as_the_local_one_does() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("t.txt"), text()).unwrap();
    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(d, &["store", "put", "S", "t.txt", "--page-size", "1KiB"]);
    ok(
        d,
        &[
            "store",
            "put",
            "S",
            "t.txt",
            "--name",
            "sealed",
            "--seal-tier",
            "aes256-gcm",
            "--key-file",
            "k.txt",
        ],
    );
    let server = Server::start(d, &["S", "--key-file", "k.txt"]);
    let a = server.addr.as_str();
    let key = ["--key-file", "k.txt"];
    // The same answers, local and remote: counts, offsets, regex matches, ls, read.
    for (handle, keys) in [("1", &[][..]), ("2", &key[..])] {
        for extra in [
            &["-c"][..],
            &[],
            &["--regex", "ne+dles?"],
            &["--json", "-c"],
        ] {
            let mut local = vec!["store", "grep", "S", handle, "needle"];
            let mut remote = vec!["store", "grep", "--remote", a, handle, "needle"];
            if extra.first() == Some(&"--regex") {
                local[4] = extra[1];
                remote[5] = extra[1];
                local.push("--regex");
                remote.push("--regex");
            } else {
                local.extend(extra);
                remote.extend(extra);
            }
            local.extend(keys);
            let (l, r) = (ok(d, &local), ok(d, &remote));
            if extra.contains(&"--json") {
                let (l, r): (serde_json::Value, serde_json::Value) = (
                    serde_json::from_str(&l).unwrap(),
                    serde_json::from_str(&r).unwrap(),
                );
                assert_eq!(l["lines"], r["lines"]);
                assert!(r["bytes_returned"].as_u64().unwrap() < 1000, "{r}");
                assert_eq!(r["bytes_scanned"], text().len() as u64);
            } else {
                assert_eq!(l, r, "{remote:?}");
                assert!(!r.is_empty());
            }
        }
    }
    assert_eq!(
        ok(d, &["store", "ls", "S"]),
        ok(d, &["store", "ls", "--remote", a])
    );
    ok(d, &["store", "read", "--remote", a, "2", "-o", "back.txt"]);
    assert_eq!(std::fs::read(d.join("back.txt")).unwrap(), text());
    let part = ok(
        d,
        &[
            "store", "read", "--remote", a, "1", "--offset", "10", "--length", "20",
        ],
    );
    assert_eq!(part.as_bytes(), &text()[10..30]);

    // Bad requests get errors that name the problem, and the server goes on.
    let err = fails(d, &["store", "grep", "--remote", a, "9", "x"]);
    assert!(err.contains("unknown handle 9"), "{err}");
    let err = fails(
        d,
        &[
            "store",
            "read",
            "--remote",
            a,
            "1",
            "--offset",
            "999999999",
            "--length",
            "1",
            "-o",
            "y",
        ],
    );
    assert!(err.contains("past the end"), "{err}");
    assert!(!d.join("y").exists());
    let err = fails(
        d,
        &[
            "store",
            "grep",
            "--remote",
            a,
            "1",
            "x",
            "--key-file",
            "k.txt",
        ],
    );
    assert!(
        err.contains("a server uses the keys it was started with"),
        "{err}"
    );
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let v = raw_call(&mut s, b"{\"op\":\"format_disk\"}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not one this server knows"),
        "{v}"
    );
    let v = raw_call(&mut s, b"{\"op\":\"ls\",\"v\":2}");
    assert!(
        v["error"].as_str().unwrap().contains("protocol version 2"),
        "{v}"
    );
    let v = raw_call(&mut s, b"not json");
    assert!(v["error"].as_str().unwrap().contains("not JSON"), "{v}");
    // Clients that leave midway: inside a frame's length, inside a request, and before
    // reading a big answer.
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.write_all(&[7, 0]).unwrap();
    drop(s);
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.write_all(&100u32.to_le_bytes()).unwrap();
    s.write_all(b"{\"op\":").unwrap();
    drop(s);
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let body = b"{\"op\":\"read\",\"handle\":\"1\"}";
    s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    s.write_all(body).unwrap();
    drop(s);
    // Still serving, and its counters show results, not pages, left it.
    assert_eq!(
        ok(d, &["store", "grep", "--remote", a, "1", "needle", "-c"]),
        ok(d, &["store", "grep", "S", "1", "needle", "-c"])
    );
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let v = raw_call(&mut s, b"{\"op\":\"stats\"}");
    let stats = &v["ok"];
    assert!(stats["requests"].as_u64().unwrap() >= 15, "{stats}");
    assert!(stats["errors"].as_u64().unwrap() >= 4, "{stats}");
    assert!(
        stats["bytes_scanned"].as_u64().unwrap() >= 9 * text().len() as u64,
        "{stats}"
    );
    assert!(stats["cpu_seconds"].as_f64().unwrap() > 0.0, "{stats}");
}

/// Little-endian u32 items (a skewed mix, so the sketches have something to count) and rows of
/// four f64 with a planted correlation.
fn items_and_rows() -> (Vec<u8>, Vec<u8>) {
    let mut x = 11u64;
    let mut next = move || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x >> 33
    };
    let items: Vec<u8> = (0..250_000)
        .flat_map(|_| ((next() % 40_000) as u32).to_le_bytes())
        .collect();
    let rows: Vec<u8> = (0..20_000)
        .flat_map(|_| {
            let a = next() as f64 / 2f64.powi(31);
            let b = next() as f64 / 2f64.powi(31);
            [a, a * 0.5 + b, b, -a]
                .into_iter()
                .flat_map(f64::to_le_bytes)
                .collect::<Vec<u8>>()
        })
        .collect();
    (items, rows)
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[test]
fn in_store_taps_equal_the_engines_over_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (items, rows) = items_and_rows();
    std::fs::write(d.join("items.bin"), &items).unwrap();
    std::fs::write(d.join("rows.bin"), &rows).unwrap();
    std::fs::write(d.join("t.txt"), text()).unwrap();
    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(
        d,
        &["store", "put", "S", "items.bin", "--page-size", "4KiB"],
    );
    ok(d, &["store", "put", "S", "rows.bin"]);
    ok(d, &["store", "put", "S", "t.txt", "--page-size", "1KiB"]);
    ok(
        d,
        &[
            "store",
            "put",
            "S",
            "items.bin",
            "--name",
            "sealed",
            "--compress",
            "lz4",
            "--seal-tier",
            "aes256-gcm",
            "--key-file",
            "k.txt",
        ],
    );
    let key = ["--key-file", "k.txt"];

    // sketch: the engine's own summary of the same bytes, for every lane count and sealed.
    let whole = json(&ok(
        d,
        &["sketch", "items.bin", "--format", "u32", "--json"],
    ));
    for (handle, keys) in [("1", &[][..]), ("4", &key[..])] {
        for threads in ["1", "3"] {
            let args = [
                &[
                    "store",
                    "sketch",
                    "S",
                    handle,
                    "-o",
                    "format=u32",
                    "--threads",
                    threads,
                ][..],
                &["--json"],
                keys,
            ]
            .concat();
            let v = json(&ok(d, &args));
            let r = &v["result"];
            for k in ["count", "cardinality", "f2", "min", "max"] {
                assert_eq!(
                    r[k], whole[k],
                    "{k} of handle {handle}, {threads} lanes: {v}"
                );
            }
            assert_eq!(r["records"], 250_000);
            assert_eq!(v["bytes_scanned"], items.len() as u64);
            assert!(v["bytes_returned"].as_u64().unwrap() < 2000, "{v}");
        }
    }
    let lines = json(&ok(d, &["sketch", "t.txt", "--json"]));
    let v = json(&ok(
        d,
        &["store", "sketch", "S", "3", "--threads", "2", "--json"],
    ));
    assert_eq!(v["result"]["cardinality"], lines["cardinality"]);
    assert_eq!(v["result"]["count"], lines["count"]);

    // corr: the same statistics as `inpath corr` over the file.
    let whole = json(&ok(
        d,
        &[
            "corr",
            "rows.bin",
            "--layout",
            "rows",
            "--type",
            "f64",
            "--streams",
            "4",
            "--json",
        ],
    ));
    for threads in ["1", "2"] {
        let v = json(&ok(
            d,
            &[
                "store",
                "corr",
                "S",
                "2",
                "-o",
                "type=f64,streams=4",
                "--threads",
                threads,
                "--json",
            ],
        ));
        let r = &v["result"];
        assert_eq!(r["rows"], 20_000, "{v}");
        let (a, b) = (
            r["pearson"].as_array().unwrap(),
            whole["pearson"].as_array().unwrap(),
        );
        assert_eq!(a.len(), 6);
        for (x, y) in a.iter().zip(b) {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() < 1e-12, "{x} vs {y}: {v} / {whole}");
        }
        assert!(
            (a[2].as_f64().unwrap() + 1.0).abs() < 1e-9,
            "stream 3 is -stream 0"
        );
    }

    // crc: zlib's CRC-32 of the bytes, any lane count, sealed or not.
    for (handle, bytes, keys) in [
        ("1", &items, &[][..]),
        ("4", &items, &key[..]),
        ("3", &text(), &[][..]),
    ] {
        for threads in ["1", "4"] {
            let args = [
                &["store", "crc", "S", handle, "--threads", threads, "--json"][..],
                keys,
            ]
            .concat();
            let v = json(&ok(d, &args));
            assert_eq!(v["result"]["crc32"], crc32fast::hash(bytes), "{v}");
            assert_eq!(v["result"]["bytes"], bytes.len() as u64);
        }
    }

    // Served: the same results; the server runs the taps with its own keys.
    let server = Server::start(d, &["S", "--key-file", "k.txt"]);
    let a = server.addr.as_str();
    let local = json(&ok(
        d,
        &[
            "store",
            "sketch",
            "S",
            "4",
            "-o",
            "format=u32",
            "--json",
            "--key-file",
            "k.txt",
        ],
    ));
    let remote = json(&ok(
        d,
        &[
            "store",
            "sketch",
            "--remote",
            a,
            "4",
            "-o",
            "format=u32",
            "--json",
        ],
    ));
    assert_eq!(local["result"], remote["result"]);
    let text_out = ok(d, &["store", "crc", "--remote", a, "1"]);
    assert!(
        text_out.contains(&format!("crc32 {:08x}", crc32fast::hash(&items))),
        "{text_out}"
    );

    // Bad input: a name clearly wrong, options the tap does not take, records that do not
    // fit, a sealed handle without its key.
    let err = fails(d, &["store", "sketch", "S", "1", "-o", "format=u128"]);
    assert!(
        err.contains("format=\"u128\": use u32, u64, lines or csv"),
        "{err}"
    );
    let err = fails(d, &["store", "sketch", "S", "1", "-o", "save=."]);
    assert!(err.contains("not taken over a whole input"), "{err}");
    let err = fails(d, &["store", "crc", "S", "1", "-o", "fast"]);
    assert!(err.contains("takes no options"), "{err}");
    let err = fails(d, &["store", "corr", "S", "3", "-o", "type=f64,streams=3"]);
    assert!(err.contains("do not make a whole 24-byte item"), "{err}");
    let err = fails(d, &["store", "sketch", "S", "4", "-o", "format=u32"]);
    assert!(err.contains("key"), "{err}");
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let v = raw_call(
        &mut s,
        b"{\"op\":\"tap\",\"handle\":\"1\",\"spec\":\"bloom\"}",
    );
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("there is no tap \"bloom\""),
        "{v}"
    );
}

#[test]
fn put_rm_bfs_and_chase_through_a_server() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("t.txt"), text()).unwrap();
    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(
        d,
        &[
            "store",
            "put-chase",
            "S",
            "chain",
            "--pages",
            "300",
            "--seed",
            "4",
        ],
    );
    ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "g",
            "--random",
            "rmat",
            "--vertices",
            "5000",
            "--edge-count",
            "40000",
            "--undirected",
        ],
    );
    let server = Server::start(d, &["S", "--key-file", "k.txt"]);
    let a = server.addr.as_str();

    // put: raw and sealed with the server's key; read back equal; a name put again keeps its
    // handle and gets the next generation.
    let v = json(&ok(
        d,
        &[
            "store",
            "put",
            "--remote",
            a,
            "t.txt",
            "--page-size",
            "2KiB",
            "--json",
        ],
    ));
    assert_eq!(
        (v["handle"].as_u64(), v["size"].as_u64()),
        (Some(3), Some(text().len() as u64))
    );
    let v = json(&ok(
        d,
        &[
            "store",
            "put",
            "--remote",
            a,
            "t.txt",
            "--name",
            "sealed",
            "--compress",
            "zstd",
            "--seal-tier",
            "aes256-gcm",
            "--json",
        ],
    ));
    assert_eq!(v["handle"], 4);
    assert!(v["codec"].as_str().unwrap().contains("aes256-gcm"), "{v}");
    ok(
        d,
        &[
            "store",
            "read",
            "S",
            "4",
            "-o",
            "back.txt",
            "--key-file",
            "k.txt",
        ],
    );
    assert_eq!(std::fs::read(d.join("back.txt")).unwrap(), text());
    let v = json(&ok(
        d,
        &[
            "store", "put", "--remote", a, "k.txt", "--name", "t.txt", "--json",
        ],
    ));
    assert_eq!(
        (v["handle"].as_u64(), v["generation"].as_u64()),
        (Some(3), Some(2))
    );

    // bfs and chase: the same answers as the local verbs.
    let strip = |mut v: serde_json::Value| {
        for k in [
            "seconds",
            "open_seconds",
            "bfs_seconds",
            "edges_per_second",
            "cpu_seconds",
            "runs",
            "ns_per_hop",
            "bytes_returned",
        ] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    let local = strip(json(&ok(
        d,
        &[
            "store", "bfs", "S", "2", "--source", "3", "--json", "--arrays",
        ],
    )));
    let remote = strip(json(&ok(
        d,
        &[
            "store",
            "bfs",
            "--remote",
            a,
            "2",
            "--source",
            "3",
            "--json",
            "--arrays",
            "--threads",
            "2",
        ],
    )));
    assert_eq!(local["order"], remote["order"]);
    assert_eq!(local["levels"], remote["levels"]);
    assert_eq!(local["level_sizes"], remote["level_sizes"]);
    assert!(local["reached"].as_u64().unwrap() > 1000, "{local}");
    assert_eq!(
        ok(
            d,
            &["store", "bfs", "S", "2", "--source", "3", "--levels", "-"]
        ),
        ok(
            d,
            &["store", "bfs", "--remote", a, "2", "--source", "3", "--levels", "-"]
        )
    );
    let local = strip(json(&ok(d, &["store", "chase", "S", "1", "--json"])));
    let remote = strip(json(&ok(
        d,
        &["store", "chase", "--remote", a, "1", "--json"],
    )));
    assert_eq!(local["sequence"], remote["sequence"]);
    assert_eq!(remote["hops"], 300);
    let raw = json(&ok(d, &["store", "chase", "S", "1", "--json", "--raw"]));
    assert_eq!(raw["sequence"], remote["sequence"]);

    // rm through the server.
    let out = ok(d, &["store", "rm", "--remote", a, "4"]);
    assert!(out.contains("removed handle 4@1 (sealed"), "{out}");
    let err = fails(d, &["store", "rm", "--remote", a, "4"]);
    assert!(err.contains("unknown handle 4"), "{err}");

    // Bad puts: the key file stays local, a cipher the server holds no key for, a client that
    // leaves midway or sends less than it announced. Nothing partial is stored.
    let err = fails(
        d,
        &[
            "store",
            "put",
            "--remote",
            a,
            "t.txt",
            "--key-file",
            "k.txt",
        ],
    );
    assert!(
        err.contains("seals with the keys it was started with"),
        "{err}"
    );
    let err = fails(
        d,
        &[
            "store",
            "put",
            "--remote",
            a,
            "t.txt",
            "--seal-tier",
            "aes128-ctr",
        ],
    );
    assert!(err.contains("needs a 128-bit key"), "{err}");
    let err = fails(
        d,
        &["store", "put", "--remote", a, "t.txt", "--page-size", "100"],
    );
    assert!(err.contains("512 bytes to 16 MiB"), "{err}");
    let before = ok(d, &["store", "ls", "S"]);
    let pages = || std::fs::read_dir(d.join("S/pages")).unwrap().count();
    let files = pages();
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let v = raw_call(
        &mut s,
        b"{\"op\":\"put\",\"name\":\"cut\",\"length\":100000}",
    );
    assert_eq!(v["ok"]["send"], 100_000, "{v}");
    s.write_all(&50_000u32.to_le_bytes()).unwrap();
    s.write_all(&[b'x'; 20_000]).unwrap();
    drop(s);
    let mut s = std::net::TcpStream::connect(a).unwrap();
    let v = raw_call(
        &mut s,
        b"{\"op\":\"put\",\"name\":\"short\",\"length\":100}",
    );
    assert_eq!(v["ok"]["send"], 100);
    s.write_all(&10u32.to_le_bytes()).unwrap();
    s.write_all(&[b'y'; 10]).unwrap();
    s.write_all(&0u32.to_le_bytes()).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("announced 100 bytes and sent 10"),
        "{v}"
    );
    // The connection is still in step: the next request is answered.
    let v = raw_call(&mut s, b"{\"op\":\"ls\"}");
    assert_eq!(v["ok"].as_array().unwrap().len(), 3, "{v}");
    // Let the server finish with the client that left, then nothing changed.
    let mut same = false;
    for _ in 0..100 {
        if ok(d, &["store", "ls", "S"]) == before && pages() == files {
            same = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(same, "a failed put left something behind");
}
