//! `inpath store put-graph | bfs | put-chase | chase` as a process in a temp dir: a graph whose
//! search is known by hand, random and sealed graphs, the chase against its raw-pread twin, and
//! the bad inputs with their messages and exit status.

use crate::common::{fails, inpath, ok};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn bfs_over_a_graph_known_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(
        d.join("e.txt"),
        "# a small directed graph\n0 1\n0 2\n1 3\n2 3\n3 4\n5 6\n4 4\n0 1\n",
    )
    .unwrap();
    let out = ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "g",
            "--edges",
            "e.txt",
            "--vertices",
            "8",
            "--page-size",
            "512",
        ],
    );
    assert!(
        out.starts_with("handle 1@1  g  CSR graph of 8 vertices, 8 edges, "),
        "{out}"
    );
    let text = ok(d, &["store", "bfs", "S", "1", "--source", "0"]);
    assert!(
        text.starts_with(
            "bfs from vertex 0 over handle 1 (8 vertices, 8 edges): reached 5 vertices in 4 \
             levels, 7 edges traversed\n  level sizes: 1 2 1 1\n"
        ),
        "{text}"
    );
    for threads in ["1", "2", "3"] {
        let v = json(&ok(
            d,
            &[
                "store",
                "bfs",
                "S",
                "1",
                "--source",
                "0",
                "--json",
                "--arrays",
                "--threads",
                threads,
            ],
        ));
        assert_eq!(v["reached"], 5);
        assert_eq!(v["depth"], 3);
        assert_eq!(v["edges_traversed"], 7);
        assert_eq!(v["order"], serde_json::json!([0, 1, 2, 3, 4]));
        assert_eq!(v["levels"], serde_json::json!([0, 1, 1, 2, 3, -1, -1, -1]));
        assert_eq!(
            v["predecessors"],
            serde_json::json!([-1, 0, 0, 1, 3, -1, -1, -1])
        );
    }
    ok(
        d,
        &[
            "store", "bfs", "S", "1", "--source", "5", "--levels", "l.txt",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(d.join("l.txt")).unwrap(),
        "5 0 -1\n6 1 5\n"
    );
    let out = ok(
        d,
        &["store", "bfs", "S", "1", "--source", "7", "--levels", "-"],
    );
    assert_eq!(out, "7 0 -1\n");

    // Undirected: 4 reaches back to 0.
    ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "u",
            "--edges",
            "e.txt",
            "--undirected",
            "--page-size",
            "512",
        ],
    );
    let v = json(&ok(
        d,
        &[
            "store", "bfs", "S", "2", "--source", "4", "--json", "--arrays",
        ],
    ));
    assert_eq!(v["order"], serde_json::json!([4, 3, 1, 2, 0]));
    assert_eq!(v["undirected"], true);
}

#[test]
fn random_and_sealed_graphs() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let put = json(&ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "r",
            "--random",
            "rmat",
            "--vertices",
            "4096",
            "--edge-count",
            "40000",
            "--seed",
            "3",
            "--undirected",
            "--json",
        ],
    ));
    assert_eq!(put["vertices"], 4096);
    let one = json(&ok(
        d,
        &[
            "store", "bfs", "S", "1", "--source", "1", "--json", "--arrays",
        ],
    ));
    let two = json(&ok(
        d,
        &[
            "store",
            "bfs",
            "S",
            "1",
            "--source",
            "1",
            "--json",
            "--arrays",
            "--threads",
            "2",
        ],
    ));
    for key in ["order", "levels", "predecessors", "level_sizes", "reached"] {
        assert_eq!(one[key], two[key], "{key}");
    }

    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(d, &["seal", "keygen", "-o", "other.txt"]);
    std::fs::write(d.join("e.txt"), "0 1\n1 2\n").unwrap();
    let out = ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "sealed",
            "--edges",
            "e.txt",
            "--compress",
            "lz4",
            "--seal-tier",
            "aes256-gcm",
            "--key-file",
            "k.txt",
        ],
    );
    assert!(out.contains("lz4+aes256-gcm"), "{out}");
    let v = json(&ok(
        d,
        &[
            "store",
            "bfs",
            "S",
            "2",
            "--source",
            "0",
            "--json",
            "--key-file",
            "k.txt",
        ],
    ));
    assert_eq!(v["reached"], 3);
    let err = fails(d, &["store", "bfs", "S", "2", "--source", "0"]);
    assert!(err.contains("a key file is needed"), "{err}");
    let err = fails(
        d,
        &[
            "store",
            "bfs",
            "S",
            "2",
            "--source",
            "0",
            "--key-file",
            "other.txt",
        ],
    );
    assert!(err.contains("page 0 of handle 2 does not unseal"), "{err}");
}

#[test]
fn bad_graphs_fail_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("bad.txt"), "0 1\n# fine\n1 two\n").unwrap();
    let err = fails(d, &["store", "put-graph", "S", "g", "--edges", "bad.txt"]);
    assert!(
        err.contains("bad.txt line 3: \"two\" is not a vertex id"),
        "{err}"
    );
    std::fs::write(d.join("e.txt"), "0 1\n1 9\n").unwrap();
    let err = fails(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "g",
            "--edges",
            "e.txt",
            "--vertices",
            "5",
        ],
    );
    assert!(
        err.contains("--vertices 5 is too small: e.txt names vertex 9"),
        "{err}"
    );
    let err = fails(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "g",
            "--edges",
            "e.txt",
            "--page-size",
            "1001",
        ],
    );
    assert!(err.contains("a multiple of 8"), "{err}");
    let usage = inpath(d, &["store", "put-graph", "S", "g", "--random", "rmat"]);
    assert_eq!(usage.status.code(), Some(2));

    // A graph, then one byte of a neighbour page flipped in the raw data file.
    let edges: String = (0..3000)
        .map(|i| format!("{} {}\n", i, (i + 1) % 3000))
        .collect();
    std::fs::write(d.join("big.txt"), edges).unwrap();
    ok(
        d,
        &[
            "store",
            "put-graph",
            "S",
            "g",
            "--edges",
            "big.txt",
            "--page-size",
            "512",
        ],
    );
    let err = fails(d, &["store", "bfs", "S", "1", "--source", "3000"]);
    assert!(
        err.contains("source = 3000 is out of range: a vertex id below the vertex count 3000"),
        "{err}"
    );
    let data = d.join("S/pages/1-1.pages");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = 64 + 8 * 3001 + 4 * 2000;
    bytes[at] ^= 0x40;
    std::fs::write(&data, &bytes).unwrap();
    let err = fails(d, &["store", "bfs", "S", "1", "--source", "0"]);
    assert!(
        err.contains(&format!(
            "the CSR graph in handle 1 is corrupt at page {}: the page fails its CRC-32",
            at / 512
        )),
        "{err}"
    );

    // Not a graph.
    std::fs::write(d.join("t.txt"), "just some text, not a graph\n".repeat(10)).unwrap();
    ok(d, &["store", "put", "S", "t.txt"]);
    let err = fails(d, &["store", "bfs", "S", "2", "--source", "0"]);
    assert!(
        err.contains("handle 2 does not hold a CSR graph: it starts with \"just som\""),
        "{err}"
    );
}

#[test]
fn chase_follows_the_chain_and_matches_the_pread_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = ok(
        d,
        &[
            "store",
            "put-chase",
            "S",
            "c",
            "--pages",
            "200",
            "--page-size",
            "512",
            "--seed",
            "4",
        ],
    );
    assert!(out.contains("chase file"), "{out}");
    let v = json(&ok(d, &["store", "chase", "S", "1", "--json"]));
    assert_eq!(v["hops"], 200);
    assert_eq!(v["stop"], "end");
    assert_eq!(v["mode"], "kernel");
    let seq: Vec<u64> = serde_json::from_value(v["sequence"].clone()).unwrap();
    assert_eq!(seq[0], 0);
    let mut sorted = seq.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..200).collect::<Vec<_>>());
    let raw = json(&ok(
        d,
        &[
            "store", "chase", "S", "1", "--json", "--raw", "--repeat", "3",
        ],
    ));
    assert_eq!(raw["sequence"], v["sequence"]);
    assert_eq!(raw["mode"], "pread");
    assert_eq!(raw["runs"].as_array().unwrap().len(), 3);

    let text = ok(
        d,
        &[
            "store",
            "chase",
            "S",
            "1",
            "--start",
            &seq[5].to_string(),
            "--hops",
            "3",
            "--sequence",
        ],
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "chase over handle 1 from page {}: 3 hops, stopped after the hops asked for",
            seq[5]
        )),
        "{text}"
    );
    let want: Vec<String> = seq[5..8].iter().map(|p| p.to_string()).collect();
    assert_eq!(lines[1..], want);

    ok(
        d,
        &[
            "store",
            "put-chase",
            "S",
            "ring",
            "--pages",
            "30",
            "--cycle",
            "--page-size",
            "512",
        ],
    );
    let v = json(&ok(
        d,
        &["store", "chase", "S", "2", "--json", "--start", "7"],
    ));
    assert_eq!(
        (v["stop"].as_str(), v["hops"].as_u64()),
        (Some("cycle"), Some(30))
    );
    assert_eq!(v["cycle_page"], 7);
}

#[test]
fn bad_chases_fail_with_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    ok(
        d,
        &[
            "store",
            "put-chase",
            "S",
            "c",
            "--pages",
            "10",
            "--page-size",
            "512",
        ],
    );
    let err = fails(d, &["store", "chase", "S", "1", "--start", "10"]);
    assert!(
        err.contains("start page = 10 is out of range: a page of the handle (it has 10)"),
        "{err}"
    );
    // Point page 0 past the end, with a valid header CRC.
    let data = d.join("S/pages/1-1.pages");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[24..32].copy_from_slice(&99u64.to_le_bytes());
    let crc = crc32(&bytes[..36]);
    bytes[36..40].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&data, &bytes).unwrap();
    let err = fails(d, &["store", "chase", "S", "1"]);
    assert!(
        err.contains(
            "the chase file in handle 1 is corrupt at page 0: the page names page 99 as the \
             next, past the last page 9"
        ),
        "{err}"
    );
    std::fs::write(d.join("t.txt"), vec![b'q'; 3000]).unwrap();
    ok(d, &["store", "put", "S", "t.txt"]);
    let err = fails(d, &["store", "chase", "S", "2"]);
    assert!(err.contains("handle 2 does not hold a chase file"), "{err}");
    ok(d, &["seal", "keygen", "-o", "k.txt"]);
    ok(
        d,
        &[
            "store",
            "put-chase",
            "S",
            "sealed",
            "--pages",
            "5",
            "--seal-tier",
            "aes256-gcm",
            "--key-file",
            "k.txt",
        ],
    );
    let err = fails(d, &["store", "chase", "S", "3", "--raw"]);
    assert!(err.contains("--raw reads raw pages"), "{err}");
    let v = json(&ok(
        d,
        &["store", "chase", "S", "3", "--json", "--key-file", "k.txt"],
    ));
    assert_eq!(v["hops"], 5);
}

/// CRC-32 (IEEE), bit by bit: the chase header's checksum, computed independently.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
