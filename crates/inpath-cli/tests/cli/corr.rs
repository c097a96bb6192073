//! `inpath corr` end to end: the real binary on files in a temporary directory.

use crate::common::program;
use std::path::Path;
use std::process::Output;

fn inpath(args: &[&str], dir: &Path) -> Output {
    program(dir).run(args)
}

fn ok_json(args: &[&str], dir: &Path) -> serde_json::Value {
    crate::common::ok_json(dir, args)
}

fn fails(args: &[&str], dir: &Path, needle: &str) {
    program(dir).fails(args, needle);
}

/// 16 u32 streams in 64-byte lines: stream s = t * (s + 1), stream 15 = 10^6 - t, stream 14
/// constant.
fn lines_file(dir: &Path, rows: u32) -> std::path::PathBuf {
    let mut bytes = Vec::new();
    for t in 0..rows {
        for s in 0..16u32 {
            let v = match s {
                15 => 1_000_000 - t,
                14 => 7,
                _ => t * (s + 1),
            };
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    let path = dir.join("lines.bin");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn lines_layout_json_in_the_reference_order() {
    let dir = tempfile::tempdir().unwrap();
    lines_file(dir.path(), 1000);
    for threads in ["1", "3"] {
        let v = ok_json(
            &[
                "corr",
                "lines.bin",
                "--layout",
                "lines",
                "--type",
                "u32",
                "--json",
                "-j",
                threads,
            ],
            dir.path(),
        );
        assert_eq!(v["streams"], 16);
        assert_eq!(v["rows"], 1000);
        assert_eq!(v["exact"], true);
        let r = v["pearson"].as_array().unwrap();
        assert_eq!(r.len(), 120);
        assert_eq!(r[0], 1.0, "(0,1)");
        assert_eq!(r[14], -1.0, "(0,15) is the 15th coefficient");
        assert!(r[13].is_null(), "(0,14): constant stream gives null");
        assert_eq!(v["regression"]["slope"][0], 2.0);
        assert_eq!(v["regression"]["intercept"][0], 0.0);
    }
    let v = ok_json(
        &[
            "corr",
            "lines.bin",
            "--layout",
            "lines",
            "--type",
            "u32",
            "--json",
            "--constant",
            "zero",
        ],
        dir.path(),
    );
    assert_eq!(v["pearson"][13], 0.0);
}

#[test]
fn save_merge_show_equals_one_job() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    lines_file(d, 1000);
    let bytes = std::fs::read(d.join("lines.bin")).unwrap();
    std::fs::write(d.join("a.bin"), &bytes[..64 * 300]).unwrap();
    std::fs::write(d.join("b.bin"), &bytes[64 * 300..]).unwrap();
    let common = ["--layout", "lines", "--type", "u32", "--json", "--stats"];
    let whole = ok_json(
        &[&["corr", "lines.bin", "--save", "whole.stats"][..], &common].concat(),
        d,
    );
    ok_json(
        &[&["corr", "a.bin", "--save", "a.stats"][..], &common].concat(),
        d,
    );
    ok_json(
        &[&["corr", "b.bin", "--save", "b.stats"][..], &common].concat(),
        d,
    );
    let merged = ok_json(
        &[
            "corr", "merge", "a.stats", "b.stats", "-o", "ab.stats", "--json", "--stats",
        ],
        d,
    );
    assert_eq!(merged["statistics"], whole["statistics"]);
    assert_eq!(merged["pearson"], whole["pearson"]);
    assert_eq!(
        std::fs::read(d.join("ab.stats")).unwrap(),
        std::fs::read(d.join("whole.stats")).unwrap()
    );
    let shown = ok_json(&["corr", "show", "ab.stats", "--json"], d);
    assert_eq!(shown["pearson"], whole["pearson"]);
    // Two files in one job equal the whole file.
    let both = ok_json(&[&["corr", "a.bin", "b.bin"][..], &common].concat(), d);
    assert_eq!(both["statistics"], whole["statistics"]);
}

#[test]
fn columns_rows_and_csv_layouts_agree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (m, n) = (5usize, 777usize);
    let value = |t: usize, s: usize| -> i16 {
        ((t * 37 + s * 11) % 101) as i16 * if s.is_multiple_of(2) { 1 } else { -3 } + (t % 7) as i16
    };
    let mut rows = Vec::new();
    let mut cols = Vec::new();
    let mut csv = String::from("a,b,c,d,e\n");
    for t in 0..n {
        for s in 0..m {
            rows.extend_from_slice(&value(t, s).to_le_bytes());
        }
        let cells: Vec<String> = (0..m).map(|s| value(t, s).to_string()).collect();
        csv.push_str(&cells.join(","));
        csv.push('\n');
    }
    for s in 0..m {
        for t in 0..n {
            cols.extend_from_slice(&value(t, s).to_le_bytes());
        }
    }
    std::fs::write(d.join("rows.bin"), rows).unwrap();
    std::fs::write(d.join("cols.bin"), cols).unwrap();
    std::fs::write(d.join("data.csv"), csv).unwrap();
    let a = ok_json(
        &[
            "corr",
            "rows.bin",
            "--layout",
            "rows",
            "--type",
            "i16",
            "--streams",
            "5",
            "--json",
            "--stats",
        ],
        d,
    );
    for j in ["1", "4"] {
        let b = ok_json(
            &[
                "corr",
                "cols.bin",
                "--layout",
                "columns",
                "--type",
                "i16",
                "--streams",
                "5",
                "--json",
                "--stats",
                "-j",
                j,
            ],
            d,
        );
        assert_eq!(a["statistics"], b["statistics"]);
    }
    let c = ok_json(
        &["corr", "data.csv", "--type", "i16", "--json", "--stats"],
        d,
    );
    assert_eq!(a["statistics"], c["statistics"]);
    assert_eq!(c["names"], serde_json::json!(["a", "b", "c", "d", "e"]));
    let sel = ok_json(
        &[
            "corr",
            "data.csv",
            "--columns",
            "e,a",
            "--type",
            "i32",
            "--json",
        ],
        d,
    );
    assert_eq!(sel["names"], serde_json::json!(["e", "a"]));
    assert_eq!(sel["pearson"][0], a["pearson"][3], "r(e, a) = r(a, e)");
}

#[test]
fn text_report_heatmap_and_spearman() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("m.csv"),
        "x,y,z\n1,1,5\n2,4,4\n3,9,3\n4,16,2\n5,25,1\n",
    )
    .unwrap();
    let out = inpath(&["corr", "m.csv", "--heatmap", "h.svg"], d);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Pearson correlation of 3 streams x 5 rows of f64"),
        "{text}"
    );
    assert!(text.contains("strongest 3 of 3 pairs"), "{text}");
    let svg = std::fs::read_to_string(d.join("h.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(
        svg.contains(">x</text>") && svg.contains(">z</text>") && svg.contains("-1.00"),
        "labels and values"
    );
    // Spearman: y = x^2 is monotone, so rho = 1 exactly (Pearson is not).
    let v = ok_json(&["corr", "m.csv", "--spearman", "--json"], d);
    assert_eq!(v["method"], "spearman");
    assert_eq!(v["pearson"][0], 1.0);
    assert_eq!(v["pearson"][1], -1.0);
    let p = ok_json(&["corr", "m.csv", "--json"], d);
    assert!(p["pearson"][0].as_f64().unwrap() < 1.0);
}

#[test]
fn bad_inputs_fail_clearly_without_panics() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("ragged.csv"), "a,b,c\n1,2,3\n4,5\n").unwrap();
    std::fs::write(d.join("text.csv"), "a,b\n1,2\n3,oops\n").unwrap();
    std::fs::write(d.join("one.csv"), "a\n1\n2\n").unwrap();
    std::fs::write(d.join("odd.bin"), vec![0u8; 64 * 3 + 5]).unwrap();
    std::fs::write(d.join("u8.bin"), vec![1u8; 64]).unwrap();
    std::fs::write(
        d.join("junk.stats"),
        b"not statistics at all, not at all, not at all",
    )
    .unwrap();
    fails(
        &["corr", "ragged.csv"],
        d,
        "CSV row 3 has 2 field(s) but 3 are needed",
    );
    fails(
        &["corr", "text.csv"],
        d,
        "row 3, column \"b\": \"oops\" is not a number",
    );
    fails(
        &["corr", "one.csv"],
        d,
        "streams = 1 is out of range: 2 to 8192",
    );
    fails(
        &["corr", "odd.bin", "--layout", "lines", "--type", "u16"],
        d,
        "5 byte(s) that do not make a whole 64-byte item (3 whole items",
    );
    fails(
        &[
            "corr",
            "odd.bin",
            "--layout",
            "rows",
            "--type",
            "u8",
            "--streams",
            "1",
        ],
        d,
        "streams = 1 is out of range",
    );
    fails(
        &[
            "corr",
            "odd.bin",
            "--layout",
            "columns",
            "--type",
            "u8",
            "--streams",
            "2",
        ],
        d,
        "is not 2 whole columns",
    );
    fails(
        &["corr", "missing.bin", "--layout", "lines", "--type", "u8"],
        d,
        "cannot read missing.bin",
    );
    fails(
        &["corr", "u8.bin", "--type", "u8"],
        d,
        "choose a layout with --layout",
    );
    fails(
        &["corr", "u8.bin", "--layout", "rows", "--type", "u8"],
        d,
        "--streams M",
    );
    fails(
        &["corr", "u8.bin", "--layout", "lines"],
        d,
        "binary layouts need an item type",
    );
    // A thread count out of range is refused as the command line is read (exit 2, as clap
    // refuses any bad argument).
    let out = inpath(
        &[
            "corr", "u8.bin", "--layout", "lines", "--type", "u8", "-j", "0",
        ],
        d,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("threads = 0 is out of range: 1 to 256"),
        "{stderr}"
    );
    fails(
        &["corr", "show", "junk.stats"],
        d,
        "not a corr statistics file",
    );
    fails(
        &["corr", "show", "nothing.stats"],
        d,
        "cannot read nothing.stats",
    );
    // Mismatched statistics on merge.
    assert!(inpath(
        &["corr", "u8.bin", "--layout", "lines", "--type", "u8", "--save", "a.stats"],
        d
    )
    .status
    .success());
    assert!(inpath(
        &[
            "corr",
            "u8.bin",
            "--layout",
            "rows",
            "--type",
            "u8",
            "--streams",
            "32",
            "--save",
            "b.stats"
        ],
        d
    )
    .status
    .success());
    fails(
        &["corr", "merge", "a.stats", "b.stats", "-o", "c.stats"],
        d,
        "stream counts differ: 64 and 32",
    );
    assert!(!d.join("c.stats").exists());
}
