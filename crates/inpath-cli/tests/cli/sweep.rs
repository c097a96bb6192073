//! The bad-input sweep: every command of the real binary, fed missing, empty, directory,
//! truncated, odd-length, oversized-parameter and garbage inputs, outputs that are inputs,
//! unwritable targets, a full disk (a file-size limit) and closed pipes.
//!
//! Each failing case asserts a non-zero exit, the error text fragment, no panic, and that the
//! working directory is exactly as before: every file byte-identical (inputs unchanged, old
//! outputs untouched) and no new file (no partial output, no stray temporary file).

use inpath_testkit::dir::{describe_change, snapshot};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_inpath")
}

fn check_failure(dir: &Path, what: &str, out: &Output, fragment: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{what}: exited 0, should fail (stderr {stderr:?})"
    );
    // 1: the command failed; 2: clap refused the arguments. Never a signal.
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{what}: exit {:?}, {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{what}: panicked: {stderr}");
    assert!(
        stderr.contains(fragment),
        "{what}: stderr {stderr:?} lacks {fragment:?}"
    );
    eprintln!("{what}: {}", stderr.trim_end().replace('\n', " | "));
    let _ = dir;
}

/// A directory of valid and invalid inputs, made with the binary itself where it can be.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let f = Fixture { dir };
        let text: String = (0..3000)
            .map(|i| format!("{},{},user{}\n", i, (i * 7919) % 1000, i % 37))
            .collect();
        f.write("data.csv", format!("id,score,user\n{text}").as_bytes());
        let items: Vec<u8> = (0..20_000u32)
            .flat_map(|i| (i * 2_654_435_761u32 % 5000).to_le_bytes())
            .collect();
        f.write("items.bin", &items);
        f.write("odd.bin", &items[..4 * 1000 + 3]);
        f.write("empty", b"");
        let mut garbage = Vec::with_capacity(4096);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            garbage.push((x >> 24) as u8);
        }
        f.write("garbage.bin", &garbage);
        f.write("text.csv", b"a,b\n1,2\n3,oops\n");
        std::fs::create_dir(f.path("adir")).unwrap();
        std::os::unix::fs::symlink("data.csv", f.path("link.csv")).unwrap();
        std::fs::hard_link(f.path("data.csv"), f.path("hard.csv")).unwrap();
        f.ok(&["seal", "keygen", "-o", "keys.txt"]);
        f.ok(&["seal", "keygen", "-o", "other.txt"]);
        f.ok(&["seal", "keygen", "-o", "keys128.txt", "--bits", "128"]);
        // A valid key file others can read, a raw binary key and a text file that is no key.
        let key_text = std::fs::read(f.path("keys.txt")).unwrap();
        f.write("open.txt", &key_text);
        f.chmod("open.txt", 0o644);
        f.write("raw.key", &garbage[..32]);
        f.chmod("raw.key", 0o600);
        f.write("empty.key", b"");
        f.chmod("empty.key", 0o600);
        f.write(
            "notkeys.txt",
            b"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4\n",
        );
        f.chmod("notkeys.txt", 0o600);
        f.ok(&[
            "seal",
            "data.csv",
            "-o",
            "data.sealed",
            "--page-size",
            "4KiB",
            "--key-file",
            "keys.txt",
            "-q",
        ]);
        let sealed = std::fs::read(f.path("data.sealed")).unwrap();
        f.write("trunc.sealed", &sealed[..sealed.len() - 10]);
        f.write("head.sealed", &sealed[..40]);
        let mut tampered = sealed.clone();
        tampered[64 + 20] ^= 0x10;
        f.write("tampered.sealed", &tampered);
        // Headers with a valid CRC claiming enormous records: 2^40 bytes (more than arrives),
        // and 2^64 - 11 (which once wrapped the record length around).
        for (name, n) in [("huge.sealed", 1u64 << 40), ("wrap.sealed", u64::MAX - 10)] {
            let mut h = Vec::new();
            h.extend_from_slice(b"IPSL");
            h.extend_from_slice(&[1, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            h.extend_from_slice(&n.to_le_bytes());
            h.extend_from_slice(&n.to_le_bytes());
            h.extend_from_slice(&[0; 28]);
            let crc = crc32c::crc32c(&h);
            h.extend_from_slice(&crc.to_le_bytes());
            h.extend_from_slice(&[7; 100]);
            f.write(name, &h);
        }
        f.ok(&["compress", "--format", "gzip", "data.csv", "-o", "data.gz"]);
        let gz = std::fs::read(f.path("data.gz")).unwrap();
        f.write("trunc.gz", &gz[..gz.len() / 2]);
        f.ok(&[
            "sketch",
            "items.bin",
            "--format",
            "u32",
            "--save",
            "a.skt",
            "--hll-p",
            "10",
            "--cm",
            "2x6",
            "--agms",
            "2x6",
            "-q",
        ]);
        f.ok(&[
            "sketch",
            "items.bin",
            "--format",
            "u32",
            "--save",
            "b.skt",
            "--hll-p",
            "12",
            "-q",
        ]);
        let skt = std::fs::read(f.path("a.skt")).unwrap();
        f.write("trunc.skt", &skt[..skt.len() / 2]);
        f.ok(&[
            "corr",
            "data.csv",
            "--columns",
            "id,score",
            "--save",
            "a.stats",
        ]);
        f.ok(&[
            "corr",
            "items.bin",
            "--layout",
            "rows",
            "--type",
            "u32",
            "--streams",
            "4",
            "--save",
            "b.stats",
        ]);
        let stats = std::fs::read(f.path("a.stats")).unwrap();
        f.write("trunc.stats", &stats[..stats.len() - 7]);
        // Existing outputs a failed command must leave alone.
        f.write("out.bin", b"the old output\n");
        f
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path(name), bytes).unwrap();
    }

    fn chmod(&self, name: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.path(name), std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    fn ok(&self, args: &[&str]) {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs a case that must fail and leave the directory exactly as it was.
    fn fails(&self, args: &[&str], fragment: &str) {
        self.fails_with(self.cmd(args), &format!("{args:?}"), fragment);
    }

    fn fails_with(&self, mut cmd: Command, what: &str, fragment: &str) {
        let before = snapshot(self.dir.path());
        let out = cmd.output().unwrap();
        check_failure(self.dir.path(), what, &out, fragment);
        let after = snapshot(self.dir.path());
        assert!(
            before == after,
            "{what}: the directory changed: {}",
            describe_change(&before, &after)
        );
    }
}

#[test]
fn codec_bad_inputs() {
    let f = Fixture::new();
    let table: &[(&[&str], &str)] = &[
        (
            &["compress", "--format", "gzip", "nope.csv", "-o", "out.bin"],
            "cannot read nope.csv",
        ),
        (
            &["compress", "--format", "gzip", "adir", "-o", "out.bin"],
            "is a directory",
        ),
        (
            &["compress", "--format", "rar", "data.csv", "-o", "out.bin"],
            "format = rar is out of range",
        ),
        (
            &[
                "compress", "--format", "zstd", "--level", "99", "data.csv", "-o", "out.bin",
            ],
            "level = 99 is out of range: 1 to 22",
        ),
        (
            &["compress", "--format", "gzip", "data.csv", "-o", "data.csv"],
            "same file as the input data.csv",
        ),
        (
            &["compress", "--format", "gzip", "data.csv", "-o", "link.csv"],
            "same file as the input data.csv",
        ),
        (
            &["compress", "--format", "gzip", "data.csv", "-o", "hard.csv"],
            "same file as the input data.csv",
        ),
        (
            &[
                "compress",
                "--format",
                "gzip",
                "./data.csv",
                "-o",
                "adir/../data.csv",
            ],
            "same file as the input",
        ),
        (
            &["compress", "--format", "gzip", "data.csv", "-o", "adir"],
            "is a directory",
        ),
        (
            &[
                "compress",
                "--format",
                "gzip",
                "data.csv",
                "-o",
                "nodir/out.gz",
            ],
            "cannot write nodir/out.gz",
        ),
        (
            &[
                "compress",
                "--format",
                "gzip",
                "data.csv",
                "-o",
                "data.csv/out.gz",
            ],
            "cannot write data.csv/out.gz",
        ),
        (
            &["decompress", "nope.gz", "-o", "out.bin"],
            "cannot read nope.gz",
        ),
        (&["decompress", "adir", "-o", "out.bin"], "is a directory"),
        (
            &["decompress", "empty", "-o", "out.bin"],
            "cannot tell the format of empty",
        ),
        (
            &["decompress", "garbage.bin", "-o", "out.bin"],
            "cannot tell the format of garbage.bin",
        ),
        (
            &[
                "decompress",
                "--format",
                "zstd",
                "garbage.bin",
                "-o",
                "o2.txt",
            ],
            "zstd input is not valid",
        ),
        (
            &["decompress", "--format", "rar", "data.gz", "-o", "out.bin"],
            "format = rar is out of range",
        ),
        (
            &["decompress", "trunc.gz", "-o", "out.bin"],
            "gzip stream is truncated",
        ),
        (
            &["decompress", "trunc.gz", "-o", "new.txt"],
            "gzip stream is truncated",
        ),
        (
            &["decompress", "data.gz", "-o", "data.gz"],
            "same file as the input data.gz",
        ),
    ];
    for (args, fragment) in table {
        f.fails(args, fragment);
    }
    // Every streaming format, truncated and damaged.
    for format in ["gzip", "zlib", "deflate", "lz4", "snappy", "zstd"] {
        f.ok(&["compress", "--format", format, "data.csv", "-o", "c.bin"]);
        let c = std::fs::read(f.path("c.bin")).unwrap();
        std::fs::remove_file(f.path("c.bin")).unwrap();
        f.write("c.trunc", &c[..c.len() * 2 / 3]);
        f.fails(
            &["decompress", "--format", format, "c.trunc", "-o", "c.out"],
            "is truncated",
        );
        let mut bad = c.clone();
        let at = bad.len() / 2;
        bad[at] ^= 0x5a;
        bad[at + 1] ^= 0xa5;
        f.write("c.bad", &bad);
        let out = f
            .cmd(&["decompress", "--format", format, "c.bad", "-o", "c.out"])
            .output()
            .unwrap();
        // Raw deflate has no checksum: a damaged stream may still decode, to other bytes.
        if format != "deflate" {
            check_failure(
                f.dir.path(),
                &format!("damaged {format}"),
                &out,
                &format!("c.bad ({format} stream)"),
            );
            assert!(
                !f.path("c.out").exists(),
                "damaged {format}: partial output left"
            );
        }
        let _ = std::fs::remove_file(f.path("c.out"));
        std::fs::remove_file(f.path("c.trunc")).unwrap();
        std::fs::remove_file(f.path("c.bad")).unwrap();
    }
}

#[test]
fn seal_bad_inputs() {
    let f = Fixture::new();
    let k = ["--key-file", "keys.txt"];
    // `inpath seal INPUT -o OUTPUT EXTRA...`
    let seal_io = |input: &str, output: &str, extra: &[&str]| -> Vec<String> {
        ["seal", input, "-o", output]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let seal = |extra: &[&str]| seal_io("data.csv", "out.bin", extra);
    let table: Vec<(Vec<String>, &str)> = vec![
        (seal(&[]), "needs --key-file"),
        (
            seal(&["--key-file", "nope.txt"]),
            "cannot read key file nope.txt",
        ),
        (seal(&["--key-file", "adir"]), "is a directory"),
        (seal(&["--key-file", "open.txt"]), "chmod 600 open.txt"),
        (seal(&["--key-file", "raw.key"]), "perhaps a raw binary key"),
        (seal(&["--key-file", "raw.key"]), "inpath seal keygen"),
        (
            seal(&["--key-file", "notkeys.txt"]),
            "expected the signature line `inpath-seal-keys 1`",
        ),
        (
            seal(&["--key-file", "empty.key"]),
            "empty: the first line must be `inpath-seal-keys 1`",
        ),
        (seal(&["--key-file", "keys128.txt"]), "needs a 256-bit key"),
        (seal(&[k[0], k[1], "--key-id", "77"]), "no key with id 77"),
        (
            seal(&[k[0], k[1], "--page-size", "0"]),
            "--page-size 0 is out of range",
        ),
        (
            seal(&[k[0], k[1], "--page-size", "2GiB"]),
            "out of range: 1 byte to 1 GiB",
        ),
        (
            seal(&[k[0], k[1], "--page-size", "99999999999GiB"]),
            "too large",
        ),
        (
            seal(&[k[0], k[1], "--threads", "0"]),
            "threads = 0 is out of range: 1 to 256",
        ),
        (
            seal(&[k[0], k[1], "--cipher", "aes512-ctr"]),
            "cipher = aes512-ctr is out of range",
        ),
        (
            seal(&[k[0], k[1], "--compress", "rar"]),
            "compression = rar is out of range",
        ),
        (
            seal(&[k[0], k[1], "--compress", "zstd-99"]),
            "compression = zstd-99 is out of range",
        ),
        (seal_io("nope.csv", "out.bin", &k), "cannot read nope.csv"),
        (seal_io("adir", "out.bin", &k), "is a directory"),
        (
            seal_io("data.csv", "data.csv", &k),
            "same file as the input data.csv",
        ),
        (
            seal_io("data.csv", "keys.txt", &k),
            "same file as the input keys.txt",
        ),
        (seal_io("data.csv", "adir", &k), "is a directory"),
    ];
    for (args, fragment) in &table {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        f.fails(&args, fragment);
    }
    let unseal: &[(&[&str], &str)] = &[
        (
            &[
                "unseal",
                "garbage.bin",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
            ],
            "not a seal record",
        ),
        (
            &[
                "unseal",
                "garbage.bin",
                "-o",
                "out.bin",
                "--key-file",
                "keys.txt",
            ],
            "record 0 of garbage.bin",
        ),
        (
            &[
                "unseal",
                "trunc.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
            ],
            "truncated",
        ),
        (
            &[
                "unseal",
                "head.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
            ],
            "truncated",
        ),
        (
            &[
                "unseal",
                "tampered.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
            ],
            "seal record payload is damaged",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "other.txt",
            ],
            "authentication failed",
        ),
        (
            &["unseal", "data.sealed", "-o", "out.txt"],
            "no key with id 1",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "open.txt",
            ],
            "has mode 0644",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "raw.key",
            ],
            "inpath-seal-keys 1",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
                "--max-page",
                "16",
            ],
            "limit of 16 bytes",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
                "--threads",
                "0",
            ],
            "threads = 0 is out of range: 1 to 256",
        ),
        (
            &[
                "unseal",
                "data.sealed",
                "-o",
                "data.sealed",
                "--key-file",
                "keys.txt",
            ],
            "same file as the input data.sealed",
        ),
        (
            &[
                "unseal",
                "nope.sealed",
                "-o",
                "out.txt",
                "--key-file",
                "keys.txt",
            ],
            "cannot read nope.sealed",
        ),
        (
            &["unseal", "adir", "-o", "out.txt", "--key-file", "keys.txt"],
            "is a directory",
        ),
        (&["seal", "inspect", "garbage.bin"], "not a seal record"),
        (&["seal", "inspect", "trunc.sealed"], "truncated"),
        (
            &["seal", "inspect", "tampered.sealed"],
            "1 damaged record(s)",
        ),
        (
            &["seal", "inspect", "nope.sealed"],
            "cannot read nope.sealed",
        ),
        (
            &["seal", "inspect", "huge.sealed"],
            "seal record payload is truncated: 1099511627840 bytes needed, 164 available",
        ),
        (
            &["seal", "inspect", "wrap.sealed"],
            "seal record payload length claims 18446744073709551605 bytes",
        ),
        (
            &["unseal", "huge.sealed", "-o", "out.txt"],
            "page length claims 1099511627776 bytes, more than the limit of 1073741824 bytes",
        ),
        (
            &[
                "unseal",
                "huge.sealed",
                "-o",
                "out.txt",
                "--max-page",
                "2000GiB",
            ],
            "seal record payload is truncated",
        ),
        (
            &[
                "unseal",
                "wrap.sealed",
                "-o",
                "out.txt",
                "--max-page",
                "18446744073709551615",
            ],
            "payload length claims",
        ),
        (
            &["seal", "keygen", "-o", "keys.txt"],
            "keys.txt exists; use --append",
        ),
        (
            &["seal", "keygen", "-o", "new.txt", "--bits", "100"],
            "key bits = 100 is out of range",
        ),
        (&["seal", "keygen", "-o", "adir"], "adir exists"),
        (
            &["seal", "keygen", "-o", "nodir/k.txt"],
            "cannot write nodir/k.txt",
        ),
        (
            &["seal", "keygen", "-o", "keys.txt", "--append", "--id", "1"],
            "key id 1 is already in keys.txt",
        ),
        (
            &["seal", "keygen", "-o", "data.csv", "--append"],
            "key file data.csv",
        ),
        (
            &["seal", "keygen", "-o", "notkeys.txt", "--append"],
            "expected the signature line",
        ),
    ];
    for (args, fragment) in unseal {
        f.fails(args, fragment);
    }
    // The explicit override uses a readable key file, with a warning.
    let out = f
        .cmd(&[
            "seal",
            "data.csv",
            "-o",
            "o.sealed",
            "--key-file",
            "open.txt",
            "--allow-insecure-key-file",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning: key file open.txt has mode 0644")
    );
    // The default tier is authenticated.
    let info = f
        .cmd(&["seal", "inspect", "o.sealed", "--json"])
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert!(
        info["tiers"][0]["tier"]
            .as_str()
            .unwrap()
            .ends_with("aes256-gcm"),
        "{info}"
    );
    // keygen writes 0600, also when --append rewrites the file.
    f.ok(&["seal", "keygen", "-o", "keys.txt", "--append"]);
    for name in ["keys.txt", "other.txt"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f.path(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
}

#[test]
fn sketch_and_corr_bad_inputs() {
    let f = Fixture::new();
    let table: &[(&[&str], &str)] = &[
        (&["sketch", "nope.bin"], "cannot read nope.bin"),
        (&["sketch", "adir"], "is a directory"),
        (
            &["sketch", "odd.bin", "--format", "u32", "--save", "out.bin"],
            "3 byte(s) that do not make a whole 4-byte item",
        ),
        (
            &["sketch", "items.bin", "--hll-p", "30", "--save", "n.skt"],
            "hll_p = 30 is out of range",
        ),
        (
            &["sketch", "items.bin", "--cm", "6x40", "--save", "n.skt"],
            "cm_p = 40 is out of range",
        ),
        (&["sketch", "items.bin", "--cm", "banana"], "is not ROWSxP"),
        (
            &[
                "sketch",
                "items.bin",
                "--sketches",
                "hll,bogus",
                "--save",
                "n.skt",
            ],
            "a list of hll, cm, agms",
        ),
        (
            &["sketch", "items.bin", "--agms", "99x13"],
            "agms_rows = 99 is out of range",
        ),
        (
            &["sketch", "items.bin", "--seed", "0xZZ"],
            "--seed \"0xZZ\" is not a number",
        ),
        (
            &["sketch", "items.bin", "--threads", "0"],
            "threads = 0 is out of range",
        ),
        (
            &["sketch", "data.csv", "--column", "nosuch"],
            "CSV column \"nosuch\" not found",
        ),
        (
            &["sketch", "items.bin", "--save", "items.bin"],
            "same file as the input items.bin",
        ),
        (&["sketch", "items.bin", "--save", "adir"], "is a directory"),
        (
            &["sketch", "merge", "a.skt", "garbage.bin", "-o", "out.bin"],
            "sketch file garbage.bin is not valid",
        ),
        (
            &["sketch", "merge", "a.skt", "trunc.skt", "-o", "out.bin"],
            "sketch file trunc.skt is not valid",
        ),
        (
            &["sketch", "merge", "a.skt", "empty", "-o", "out.bin"],
            "sketch file empty is not valid: it is 0 bytes long",
        ),
        (
            &["sketch", "merge", "a.skt", "b.skt", "-o", "out.bin"],
            "does not match",
        ),
        (
            &["sketch", "merge", "a.skt", "nope.skt", "-o", "out.bin"],
            "cannot read nope.skt",
        ),
        (
            &["sketch", "merge", "a.skt", "adir", "-o", "out.bin"],
            "cannot read adir",
        ),
        (
            &["sketch", "merge", "a.skt", "b.skt", "-o", "a.skt"],
            "same file as the input a.skt",
        ),
        (
            &["sketch", "query", "garbage.bin", "--key", "1"],
            "sketch magic",
        ),
        (&["sketch", "show", "trunc.skt"], "(truncated)"),
        (
            &["corr", "nope.bin", "--layout", "lines", "--type", "u8"],
            "cannot read nope.bin",
        ),
        (
            &["corr", "adir", "--layout", "lines", "--type", "u8"],
            "is a directory",
        ),
        (
            &[
                "corr", "odd.bin", "--layout", "lines", "--type", "u32", "--save", "out.bin",
            ],
            "do not make a whole 64-byte item",
        ),
        (
            &[
                "corr",
                "odd.bin",
                "--layout",
                "columns",
                "--type",
                "u32",
                "--streams",
                "4",
            ],
            "not 4 whole columns",
        ),
        (
            &["corr", "text.csv", "--save", "out.bin"],
            "\"oops\" is not a number",
        ),
        (
            &["corr", "data.csv", "--columns", "id,nosuch"],
            "CSV column \"nosuch\" not found",
        ),
        (
            &["corr", "items.bin", "--layout", "rows", "--type", "u32"],
            "needs the number of streams",
        ),
        (
            &[
                "corr",
                "items.bin",
                "--layout",
                "rows",
                "--type",
                "u32",
                "--streams",
                "0",
            ],
            "streams = 0 is out of range",
        ),
        (
            &[
                "corr",
                "items.bin",
                "--layout",
                "lines",
                "--type",
                "u8",
                "-j",
                "0",
            ],
            "threads = 0 is out of range",
        ),
        (
            &[
                "corr",
                "items.bin",
                "--layout",
                "lines",
                "--type",
                "u8",
                "--save",
                "items.bin",
            ],
            "same file as the input items.bin",
        ),
        (
            &[
                "corr",
                "items.bin",
                "--layout",
                "lines",
                "--type",
                "u8",
                "--heatmap",
                "items.bin",
            ],
            "same file as the input items.bin",
        ),
        (
            &[
                "corr",
                "items.bin",
                "--layout",
                "lines",
                "--type",
                "u8",
                "--save",
                "x.out",
                "--heatmap",
                "x.out",
            ],
            "named as two outputs",
        ),
        (
            &["corr", "merge", "a.stats", "trunc.stats", "-o", "out.bin"],
            "statistics file trunc.stats is not valid: checksum mismatch",
        ),
        (
            &["corr", "merge", "a.stats", "garbage.bin", "-o", "out.bin"],
            "not a corr statistics file",
        ),
        (
            &["corr", "merge", "a.stats", "b.stats", "-o", "out.bin"],
            "merging b.stats",
        ),
        (
            &["corr", "merge", "a.stats", "a.stats", "-o", "a.stats"],
            "same file as the input a.stats",
        ),
        (
            &["corr", "show", "empty"],
            "statistics file empty is not valid",
        ),
        (
            &["corr", "show", "a.stats", "--heatmap", "a.stats"],
            "same file as the input a.stats",
        ),
        (
            &["corr", "show", "a.stats", "--heatmap", "nodir/h.svg"],
            "cannot write nodir/h.svg",
        ),
    ];
    for (args, fragment) in table {
        f.fails(args, fragment);
    }
    // A sketch saved without Count-Min cannot answer point queries.
    f.ok(&[
        "sketch",
        "items.bin",
        "--format",
        "u32",
        "--sketches",
        "hll",
        "--save",
        "hll.skt",
        "-q",
    ]);
    f.fails(
        &["sketch", "query", "hll.skt", "--key", "7"],
        "keeps no Count-Min (it was made with --sketches hll)",
    );
}

#[test]
fn wire_bad_inputs() {
    let f = Fixture::new();
    let table: &[(&[&str], &str)] = &[
        (
            &["wire", "sink", "--listen", "127.0.0.1:0", "--tap", "nosuch"],
            "unknown tap \"nosuch\"",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap",
                "sketch:hll_p=40",
            ],
            "hll_p = 40 is out of range",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap",
                "sketch:format=u32,top=0",
            ],
            "top=\"0\" is out of range: 1 to 50",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap",
                "sketch:column=a,top=5",
            ],
            "top= takes u32, u64 or lines records, not csv",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap",
                "sketch:format=u32,sketches=hll,top=5",
            ],
            "top= needs Count-Min",
        ),
        (
            &["wire", "sink", "--listen", "not-an-address"],
            "bad address \"not-an-address\"",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap-policy",
                "fast",
            ],
            "tap-policy = fast is out of range: exact",
        ),
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--tap",
                "crc",
                "--tap-policy",
                "lossy",
                "--job-per-message",
            ],
            "exact with --job-per-message",
        ),
        (
            &[
                "wire",
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--to",
                "127.0.0.1:9",
                "--seal",
                "raw.key",
            ],
            "inpath seal keygen",
        ),
        (
            &[
                "wire",
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--to",
                "127.0.0.1:9",
                "--seal",
                "open.txt",
            ],
            "chmod 600 open.txt",
        ),
        (
            &[
                "wire",
                "relay",
                "--listen",
                "127.0.0.1:0",
                "--to",
                "127.0.0.1:9",
                "--unseal",
                "nope.txt",
            ],
            "cannot read key file nope.txt",
        ),
    ];
    for (args, fragment) in table {
        f.fails(args, fragment);
    }
}

/// A full disk, made with a file-size limit (`ulimit -f 0`, SIGXFSZ ignored so the write
/// fails with EFBIG instead of killing the process): every writer fails cleanly, leaving
/// neither a partial output nor a temporary file.
#[test]
fn full_disk_leaves_nothing_behind() {
    let f = Fixture::new();
    let cases: &[(&str, &str)] = &[
        (
            "compress --format gzip data.csv -o out.bin",
            "cannot write out.bin",
        ),
        (
            "compress --format zstd data.csv -o new.zst",
            "cannot write new.zst",
        ),
        ("decompress data.gz -o new.csv", "cannot write new.csv"),
        (
            "seal data.csv -o out.bin --key-file keys.txt",
            "cannot write out.bin",
        ),
        (
            "unseal data.sealed -o new.csv --key-file keys.txt",
            "cannot write new.csv",
        ),
        (
            "sketch items.bin --format u32 --save new.skt",
            "cannot write new.skt",
        ),
        (
            "sketch merge a.skt a.skt -o out.bin",
            "cannot write out.bin",
        ),
        (
            "corr data.csv --columns id,score --save new.stats",
            "cannot write new.stats",
        ),
        (
            "corr merge a.stats a.stats -o out.bin",
            "cannot write out.bin",
        ),
        (
            "corr show a.stats --heatmap new.svg",
            "cannot write new.svg",
        ),
        ("seal keygen -o new.txt", "cannot write new.txt"),
    ];
    for (args, fragment) in cases {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("trap '' XFSZ; ulimit -f 0; exec \"$0\" {args}"))
            .arg(bin())
            .current_dir(f.dir.path())
            .stdin(Stdio::null());
        f.fails_with(cmd, args, fragment);
    }
    // The limit also fails streaming to standard output, without a panic.
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 0; exec \"$0\" compress --format gzip data.csv > big.gz")
        .arg(bin())
        .current_dir(f.dir.path())
        .output()
        .unwrap();
    check_failure(
        f.dir.path(),
        "compress to a full stdout",
        &out,
        "cannot write -",
    );
}

/// Targets that cannot be written: a directory under /proc (read-only to everyone, root
/// included), and a read-only directory when not running as root (root ignores directory
/// permissions, so that case is skipped under root with a note).
#[test]
fn read_only_targets_are_refused_cleanly() {
    let f = Fixture::new();
    for target in ["/proc/inpath-out.bin", "/proc/self/inpath-out.bin"] {
        f.fails(
            &["compress", "--format", "gzip", "data.csv", "-o", target],
            &format!("cannot write {target}"),
        );
        f.fails(
            &["seal", "data.csv", "-o", target, "--key-file", "keys.txt"],
            &format!("cannot write {target}"),
        );
        assert!(!Path::new(target).exists());
    }
    let ro = f.path("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("old.gz"), b"old").unwrap();
    f.chmod("ro", 0o555);
    let probe = ro.join("probe");
    if std::fs::write(&probe, b"").is_ok() {
        std::fs::remove_file(&probe).unwrap();
        eprintln!("read-only directory case skipped: running as root, which ignores directory permissions (the /proc cases above cover it)");
    } else {
        f.fails(
            &[
                "compress",
                "--format",
                "gzip",
                "data.csv",
                "-o",
                "ro/old.gz",
            ],
            "cannot write ro/old.gz",
        );
        f.fails(
            &["sketch", "items.bin", "--save", "ro/x.skt"],
            "cannot write ro/x.skt",
        );
        assert_eq!(std::fs::read(ro.join("old.gz")).unwrap(), b"old");
    }
    f.chmod("ro", 0o755);
}

/// Closed pipes: a reader that goes away (`inpath ... | head -c 0`) ends the command quietly
/// with exit 0 and no panic, for every command that streams to standard output.
#[test]
fn bad_kernel_caps_are_refused_up_front() {
    let f = Fixture::new();
    for (var, value, fragment) in [
        ("INPATH_ISA", "sse9", "use portable, avx2 or avx512"),
        (
            "INPATH_AES",
            "turbo",
            "use library, aesni, vaes256 or vaes512",
        ),
    ] {
        let mut cmd = f.cmd(&["sketch", "items.bin", "--format", "u32", "--save", "k.skt"]);
        cmd.env(var, value);
        f.fails_with(cmd, &format!("{var}={value}"), fragment);
    }
    // A valid cap runs, and names the kernel it capped to.
    let out = f
        .cmd(&["sketch", "items.bin", "--format", "u32", "--json", "-q"])
        .env("INPATH_ISA", "portable")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"kernel\": \"portable\""));
}

#[test]
fn closed_pipes_end_quietly() {
    let f = Fixture::new();
    let big: String = (0..200_000)
        .map(|i| format!("{i},{}\n", i * 31 % 977))
        .collect();
    f.write("big.csv", big.as_bytes());
    f.ok(&["compress", "--format", "zstd", "big.csv", "-o", "big.zst"]);
    f.ok(&[
        "seal",
        "big.csv",
        "-o",
        "big.sealed",
        "--key-file",
        "keys.txt",
    ]);
    let cases: &[&[&str]] = &[
        &["compress", "--format", "gzip", "big.csv"],
        &["decompress", "big.zst"],
        &["seal", "big.csv", "--key-file", "keys.txt"],
        &["unseal", "big.sealed", "--key-file", "keys.txt"],
        &["seal", "inspect", "big.sealed", "--records"],
        &["sketch", "big.csv"],
        &["corr", "big.csv", "--json", "--stats"],
        &["demo"],
    ];
    for args in cases {
        let mut child = f
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before the first byte
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
    // Through a shell pipe, as users write it.
    let out = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" compress --format gzip big.csv | head -c 0")
        .arg(bin())
        .current_dir(f.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// A redirected standard input that is also the output is refused too.
#[test]
fn standard_input_and_output_are_checked() {
    let f = Fixture::new();
    let mut cmd = f.cmd(&["compress", "--format", "gzip", "-", "-o", "data.csv"]);
    cmd.stdin(std::fs::File::open(f.path("data.csv")).unwrap());
    f.fails_with(
        cmd,
        "stdin is the output",
        "same file as the input standard input",
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("exec \"$0\" compress --format gzip data.csv >> data.csv")
        .arg(bin())
        .current_dir(f.dir.path());
    f.fails_with(cmd, "stdout appends to the input", "standard output");
    // Binary data is not written to a terminal-less stdout by accident either way; a normal
    // pipe works.
    let mut child = f
        .cmd(&["compress", "--format", "gzip", "data.csv"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut bytes).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
    let _ = std::io::stdout().flush();
}

/// Inputs without an end, values that do not fit their type, a layout that must seek given a
/// pipe, and counts far out of range: each is refused with the bound it broke, in bounded time
/// and memory (a character device of endless bytes is the worst text input there is).
#[test]
fn endless_overflowing_unseekable_and_out_of_range_inputs() {
    let f = Fixture::new();
    f.write("overflow.csv", b"a,b\n1,2\n1e999,3\n2,5\n");
    f.write("overflow32.csv", b"a,b\n1,2\n3,1e39\n2,5\n");
    f.write("nan.csv", b"a,b\n1,2\nNaN,3\n2,5\n");
    std::fs::create_dir(f.path("tables")).unwrap();
    let longest = "the longest inpath reads";
    let table: &[(&[&str], &str)] = &[
        // One endless line, on one lane and on two (the reader's carry is bounded too).
        (&["sketch", "/dev/zero", "--threads", "1"], longest),
        (&["sketch", "/dev/zero", "--threads", "2"], longest),
        (&["sketch", "--column", "0", "/dev/zero"], longest),
        (&["corr", "--layout", "csv", "/dev/zero"], longest),
        // Files of a bounded format: the saved sketch, the statistics file, a key file.
        (
            &["sketch", "query", "/dev/zero", "--key", "a"],
            "the most a saved sketch can be",
        ),
        (
            &["corr", "show", "/dev/zero"],
            "the most a statistics file can be",
        ),
        (
            &[
                "seal",
                "items.bin",
                "-o",
                "x.sealed",
                "--key-file",
                "/dev/zero",
                "--allow-insecure-key-file",
            ],
            "the most a key file can be",
        ),
        // Values that overflow their type, and non-numbers that parse as floats.
        (
            &["corr", "overflow.csv"],
            "row 3, column \"a\": \"1e999\" is not a finite number that fits f64",
        ),
        (
            &["corr", "overflow32.csv", "--type", "f32"],
            "row 3, column \"b\": \"1e39\" is not a finite number that fits f32",
        ),
        (&["corr", "nan.csv"], "\"NaN\" is not a finite number"),
        (
            &["query", "import", "overflow.csv", "tables"],
            "CSV data row 2, column a: the value is not a finite number that fits Float64",
        ),
        // One range for every thread count.
        (
            &[
                "wire",
                "sink",
                "--listen",
                "127.0.0.1:0",
                "--threads",
                "100000",
            ],
            "threads = 100000 is out of range: 1 to 256",
        ),
        (
            &["sketch", "items.bin", "--threads", "0"],
            "threads = 0 is out of range: 1 to 256",
        ),
        (
            &["corr", "data.csv", "--threads", "257"],
            "threads = 257 is out of range: 1 to 256",
        ),
        (
            &["seal", "items.bin", "-o", "x.sealed", "--threads", "9999"],
            "out of range: 1 to 256",
        ),
        (
            &["cache", "serve", "-t", "0", "--flash", "c.flash"],
            "threads = 0 is out of range: 1 to 256",
        ),
        (
            &["query", "sql", "adir", "select 1", "--threads", "1000"],
            "out of range: 1 to 256",
        ),
        (
            &["store", "grep", "adir", "1", "x", "--threads", "0"],
            "out of range: 1 to 256",
        ),
        (
            &["sketch", "items.bin", "--threads", "many"],
            "is not a thread count",
        ),
        // The other counts: read workers and sizes, connections.
        (
            &["store", "grep", "adir", "1", "x", "--readers", "100000"],
            "readers = 100000 is out of range: 1 to 64",
        ),
        (
            &["store", "grep", "adir", "1", "x", "--read-size", "1"],
            "read size 1 is out of range: 4KiB to 64MiB",
        ),
        (
            &["store", "serve", "adir", "--max-conns", "0"],
            "max connections = 0 is out of range: 1 to 1,000,000",
        ),
        (
            &["cache", "serve", "-c", "0", "--flash", "c.flash"],
            "max connections = 0 is out of range: 1 to 1,000,000",
        ),
    ];
    for (args, fragment) in table {
        f.fails(args, fragment);
    }
    // A FIFO for a layout that reads each stream's region: refused before it is opened (an
    // open would wait for a writer), so no writer is needed. It lives outside the fixture
    // directory, whose snapshot reads every file.
    let other = tempfile::tempdir().unwrap();
    let fifo = other.path().join("streams.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let fifo = fifo.to_str().unwrap();
    f.fails(
        &[
            "corr",
            "--layout",
            "columns",
            "--type",
            "u32",
            "--streams",
            "4",
            fifo,
        ],
        "is a pipe (FIFO). Save the data to a file first",
    );
    f.fails(
        &[
            "corr",
            "--layout",
            "columns",
            "--type",
            "u32",
            "--streams",
            "4",
            "/dev/zero",
        ],
        "is a character device",
    );
}

#[test]
fn security_bad_inputs() {
    let f = Fixture::new();
    let table: &[(&[&str], &str)] = &[
        (
            &["tls", "init", "pki", "--days", "0"],
            "0 is not in 1..=36500",
        ),
        (
            &[
                "tls",
                "init",
                "pki",
                "--not-before",
                "2020-13-01",
                "--not-after",
                "2020-12-31",
            ],
            "YYYY-MM-DD",
        ),
        (
            &[
                "tls",
                "init",
                "pki",
                "--not-before",
                "2020-02-01",
                "--not-after",
                "2020-01-01",
            ],
            "the end after the start",
        ),
        (
            &[
                "tls", "token", "--tokens", "t", "--name", "a b", "--role", "read",
            ],
            "a token name is 1 to 64",
        ),
        (
            &[
                "tls", "token", "--tokens", "t", "--name", "ci", "--role", "admin",
            ],
            "role \"admin\" is not valid",
        ),
        (
            &[
                "tls", "token", "--tokens", "data.csv", "--name", "ci", "--role", "read",
            ],
            "token file data.csv, line 1",
        ),
        (
            &["store", "serve", "adir", "--listen", "0.0.0.0:0"],
            "or accept an open port with --insecure-no-auth",
        ),
        (
            &[
                "store",
                "serve",
                "adir",
                "--tls-cert",
                "data.csv",
                "--tls-key",
                "keys.txt",
            ],
            "holds no certificate",
        ),
        (
            &["store", "serve", "adir", "--tokens", "data.csv"],
            "line 1: expected `NAME ROLE",
        ),
        (
            &[
                "store",
                "serve",
                "adir",
                "--tls-cert",
                "a",
                "--tls-key",
                "b",
                "--tls-min-version",
                "1.1",
            ],
            "1.2 or 1.3",
        ),
        (&["store", "serve", "adir", "--tls-cert", "a"], "--tls-key"),
        (
            &["store", "ls", "adir", "--tls-ca", "data.csv"],
            "are for a server (--remote)",
        ),
        (
            &[
                "store",
                "ls",
                "--remote",
                "127.0.0.1:1",
                "--tls-ca",
                "data.csv",
            ],
            "holds no certificate",
        ),
        (
            &[
                "store",
                "ls",
                "--remote",
                "127.0.0.1:1",
                "--token-file",
                "open.txt",
            ],
            "chmod 600",
        ),
    ];
    for (args, fragment) in table {
        f.fails(args, fragment);
    }
}
