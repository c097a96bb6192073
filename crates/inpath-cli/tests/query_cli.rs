//! `inpath query gen` and `inpath query inspect`, driving the real binary in a temp dir.

use std::path::Path;
use std::process::{Command, Output};

fn inpath(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_inpath"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run inpath")
}

fn ok(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "inpath failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn gen_then_inspect_plain_and_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gen = ok(&inpath(
        &["query", "gen", "--sf", "0.01", "tpch", "--json"],
        d,
    ));
    let tables = gen["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 8);
    assert_eq!(tables[0]["table"], "lineitem");
    assert_eq!(tables[0]["rows"], 60_175);
    assert_eq!(
        gen["rows"],
        60_175 + 15_000 + 1_500 + 2_000 + 8_000 + 100 + 25 + 5
    );

    let one = ok(&inpath(&["query", "inspect", "tpch/orders", "--json"], d));
    let t = &one["tables"][0];
    assert_eq!(t["table"], "orders");
    assert_eq!(t["rows"], 15_000);
    assert_eq!(t["pages"], 1);
    assert_eq!(t["cipher"], "none");
    let cols = t["columns"].as_array().unwrap();
    assert_eq!(cols[0]["name"], "o_orderkey");
    assert_eq!(cols[0]["encodings"]["for"], 1);
    let status = cols.iter().find(|c| c["name"] == "o_orderstatus").unwrap();
    assert_eq!(status["encodings"]["dictionary"], 1);
    assert_eq!(status["dictionary"], 3);
    assert_eq!(status["max_width"], 2);
    let all = ok(&inpath(&["query", "inspect", "tpch", "--json"], d));
    assert_eq!(all["tables"].as_array().unwrap().len(), 8);

    // Writing again into the same directory is refused; --force replaces the tables.
    let again = inpath(&["query", "gen", "--sf", "0.01", "tpch"], d);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    // Sealed: a key file, GCM, the manifest sealed too.
    let keys = inpath(&["seal", "keygen", "-o", "keys.txt"], d);
    assert!(keys.status.success());
    let gen = ok(&inpath(
        &[
            "query",
            "gen",
            "--sf",
            "0.01",
            "sealed",
            "--tier",
            "lz4+aes256-gcm",
            "--key-file",
            "keys.txt",
            "--threads",
            "2",
            "--json",
        ],
        d,
    ));
    assert_eq!(gen["cipher"], "gcm");
    let nokey = inpath(&["query", "inspect", "sealed/region"], d);
    assert!(!nokey.status.success());
    let err = String::from_utf8_lossy(&nokey.stderr);
    assert!(
        err.contains("table region") && err.contains("--key-file"),
        "{err}"
    );
    let t = ok(&inpath(
        &[
            "query",
            "inspect",
            "sealed/lineitem",
            "--key-file",
            "keys.txt",
            "--json",
        ],
        d,
    ));
    assert_eq!(t["tables"][0]["rows"], 60_175);
    assert_eq!(t["tables"][0]["cipher"], "gcm");
    assert_eq!(t["tables"][0]["compression"], "lz4");
    // A cipher without a key file is refused before anything is written.
    let bad = inpath(
        &["query", "gen", "--sf", "0.01", "x", "--tier", "aes256-ctr"],
        d,
    );
    assert!(!bad.status.success());
    assert!(!d.join("x").exists());
}
