//! `inpath sketch` end to end: the real binary in a temporary directory.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::common::command as inpath;

fn run(args: &[&str]) -> Output {
    crate::common::program(Path::new(".")).run(args)
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    crate::common::ok_json(Path::new("."), args)
}

fn fails(args: &[&str], needle: &str) {
    crate::common::program(Path::new(".")).fails(args, needle);
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.path(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    }
}

fn u32_file(items: impl Iterator<Item = u32>) -> Vec<u8> {
    items.flat_map(|v| v.to_le_bytes()).collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn summary_json_for_u32_items() {
    let f = Fixture::new();
    let data = f.write("a.bin", &u32_file((0..100_000u32).map(|i| i % 1000 + 5)));
    let v = ok_json(&["sketch", "--format", "u32", &data, "--json"]);
    assert_eq!(v["count"], 100_000);
    assert_eq!(v["min"], 5);
    assert_eq!(v["max"], 1004);
    let cardinality = v["cardinality"].as_f64().unwrap();
    assert!((cardinality - 1000.0).abs() < 5.0, "{cardinality}");
    let f2 = v["f2"].as_f64().unwrap();
    assert!((f2 / 1e7 - 1.0).abs() < 0.03, "{f2}");
    assert_eq!(v["params"]["hash"], "fast");
    assert_eq!(v["count_min"]["trustworthy"], true);
    assert_eq!(v["input"]["bytes"], 400_000);
}

#[test]
fn thread_count_does_not_change_the_saved_sketch() {
    let f = Fixture::new();
    let data = f.write(
        "a.bin",
        &u32_file((0..500_000u32).map(|i| i.wrapping_mul(2654435761) % 70_000)),
    );
    let mut files = Vec::new();
    for threads in ["1", "2", "3", "8"] {
        let out = f.path(&format!("t{threads}.skt"));
        let result = run(&[
            "sketch",
            "--format",
            "u32",
            &data,
            "--threads",
            threads,
            "--save",
            s(&out),
            "-q",
        ]);
        assert!(result.status.success());
        files.push(std::fs::read(out).unwrap());
    }
    assert!(
        files.windows(2).all(|w| w[0] == w[1]),
        "sketch files differ across thread counts"
    );
}

#[test]
fn stdin_several_files_merge_and_query() {
    let f = Fixture::new();
    let part1 = "apple\nbanana\napple\n";
    let part2 = "cherry\napple\n";
    let a = f.write("a.txt", part1.as_bytes());
    let b = f.write("b.txt", part2.as_bytes());
    // Two files as one stream equal stdin with both concatenated.
    let both = ok_json(&["sketch", &a, &b, "--json"]);
    let mut child = inpath()
        .args(["sketch", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{part1}{part2}").as_bytes())
        .unwrap();
    let piped: serde_json::Value =
        serde_json::from_slice(&child.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(both["count"], 5);
    assert_eq!(both["cardinality"], piped["cardinality"]);
    assert_eq!(both["f2_rows"], piped["f2_rows"]);
    assert_eq!(both["f2"], 11.0); // 3² + 1² + 1²

    // Save two halves, merge, query: merge equals the sketch of both.
    let (sa, sb, sm, sboth) = (
        f.path("a.skt"),
        f.path("b.skt"),
        f.path("m.skt"),
        f.path("both.skt"),
    );
    assert!(run(&["sketch", &a, "--save", s(&sa)]).status.success());
    assert!(run(&["sketch", &b, "--save", s(&sb)]).status.success());
    assert!(run(&["sketch", &a, &b, "--save", s(&sboth)])
        .status
        .success());
    let merged = ok_json(&["sketch", "merge", s(&sa), s(&sb), "-o", s(&sm), "--json"]);
    assert_eq!(merged["count"], 5);
    assert_eq!(std::fs::read(&sm).unwrap(), std::fs::read(&sboth).unwrap());
    let answers = ok_json(&[
        "sketch",
        "query",
        s(&sm),
        "--key",
        "apple",
        "--key",
        "durian",
        "--json",
    ]);
    assert_eq!(answers["answers"][0]["count_at_most"], 3);
    assert_eq!(answers["answers"][1]["count_at_most"], 0);
    let shown = ok_json(&["sketch", "show", s(&sm), "--json"]);
    assert_eq!(shown["cardinality"], merged["cardinality"]);
    let text = run(&["sketch", "query", s(&sm), "--key", "apple"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("apple  3"));
    // A key may begin with `-` (a negative number, a flag-like line).
    let dashed = f.write("dash.txt", b"-5\n-5\nx\n");
    let sd = f.path("dash.skt");
    assert!(run(&["sketch", &dashed, "--save", s(&sd)]).status.success());
    let answers = ok_json(&["sketch", "query", s(&sd), "--key", "-5", "--json"]);
    assert_eq!(answers["answers"][0]["key"], "-5");
    assert_eq!(answers["answers"][0]["count_at_most"], 2);
}

#[test]
fn csv_column_by_name_and_index() {
    let f = Fixture::new();
    let csv = f.write("e.csv", b"id,user,score\n1,ann,3.5\n2,bob,-1\n3,ann,7\n");
    let by_name = ok_json(&["sketch", "--column", "user", &csv, "--json"]);
    let by_index = ok_json(&["sketch", "--column", "1", &csv, "--json"]);
    assert_eq!(by_name["count"], 3);
    assert_eq!(by_name["f2_rows"], by_index["f2_rows"]);
    assert_eq!(by_name["input"]["column"], "user");
    let scores = ok_json(&["sketch", "--column", "score", &csv, "--json"]);
    assert_eq!(
        (scores["min"].as_f64(), scores["max"].as_f64()),
        (Some(-1.0), Some(7.0))
    );
    let tsv = f.write("e.tsv", b"ann\t1\nbob\t2\n");
    let headerless = ok_json(&[
        "sketch",
        "--column",
        "0",
        "--no-header",
        "--delimiter",
        "\\t",
        &tsv,
        "--json",
    ]);
    assert_eq!(headerless["count"], 2);
}

#[test]
fn compat_mode_matches_the_library() {
    let f = Fixture::new();
    let items: Vec<u32> = (0..50_000u32)
        .map(|i| i.wrapping_mul(7919) % 9_000)
        .collect();
    let data = f.write("c.bin", &u32_file(items.iter().copied()));
    let out = f.path("c.skt");
    assert!(run(&[
        "sketch",
        "--format",
        "u32",
        "--hash",
        "compat",
        &data,
        "--save",
        s(&out)
    ])
    .status
    .success());
    let mut library = inpath_sketch::Sketch::new(
        inpath_sketch::Params::with_hash(inpath_sketch::HashMode::Compat),
        inpath_sketch::ItemKind::U32,
    )
    .unwrap();
    library.update_u32(&items).unwrap();
    assert_eq!(
        std::fs::read(out).unwrap(),
        inpath_sketch::format::to_bytes(&library)
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let f = Fixture::new();
    let odd = f.write("odd.bin", &[0u8; 4 * 1000 + 3]);
    fails(
        &["sketch", "--format", "u32", &odd],
        "3 byte(s) that do not make a whole 4-byte item (1000 whole items",
    );
    fails(&["sketch", "--format", "u64", &odd], "8-byte item");
    fails(&["sketch", s(&f.path("missing.txt"))], "cannot read");
    let csv = f.write("e.csv", b"a,b\n1,2\n");
    fails(
        &["sketch", "--column", "c", &csv],
        "CSV column \"c\" not found; the header has 2 column(s): #0 a, #1 b",
    );
    fails(&["sketch", "--column", "5", &csv], "not found");
    let ragged = f.write("r.csv", b"a,b\n1,2\n3\n");
    fails(
        &["sketch", "--column", "b", &ragged],
        "CSV row 3 has 1 field(s) but 2 are needed",
    );
    fails(&["sketch", "--hll-p", "19", &csv], "4 to 18");
    fails(&["sketch", "--cm", "17x13", &csv], "1 to 16");
    fails(&["sketch", "--agms", "6x21", &csv], "4 to 20");
    fails(&["sketch", "--cm", "six", &csv], "ROWSxP");
    fails(
        &["sketch", "--hash", "compat", "--seed", "0x100000000", &csv],
        "seed",
    );
    fails(&["sketch", "--threads", "0", &csv], "threads");

    // Sketch files: not a sketch, truncated, damaged, incompatible.
    let good = f.path("g.skt");
    assert!(run(&["sketch", &csv, "--save", s(&good)]).status.success());
    let bytes = std::fs::read(&good).unwrap();
    let truncated = f.write("t.skt", &bytes[..bytes.len() / 2]);
    fails(&["sketch", "show", &truncated], "truncated");
    let mut flipped = bytes.clone();
    flipped[1000] ^= 1;
    let damaged = f.write("d.skt", &flipped);
    fails(
        &["sketch", "query", &damaged, "--key", "1"],
        "checksum mismatch",
    );
    fails(&["sketch", "show", &csv], "not a sketch file");
    let other = f.path("o.skt");
    assert!(run(&["sketch", &csv, "--hll-p", "12", "--save", s(&other)])
        .status
        .success());
    fails(
        &[
            "sketch",
            "merge",
            s(&good),
            s(&other),
            "-o",
            s(&f.path("m.skt")),
        ],
        "HLL precision 16 vs 12",
    );
}
