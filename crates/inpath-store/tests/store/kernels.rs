//! Search and nearest-neighbour kernels against naive references, grep, every lane count and
//! chunk size, in memory and through the store's reader.

use inpath_store::hamming::distance;
use inpath_store::kernel::{run, run_counted, run_slice};
use inpath_store::{
    FlashReader, Hamming, Literal, LiteralHits, Neighbour, Partial, PutOptions, ReaderConfig,
    RegexHits, RegexSearch, Store,
};
use std::process::Command;

use crate::common::Rng;

/// Text over a tiny alphabet, so short patterns match often, overlap, and cross every boundary.
fn tiny_text(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    (0..len)
        .map(|_| match r.below(10) {
            0..=5 => b'a',
            6..=7 => b'b',
            8 => b'\n',
            _ => b' ',
        })
        .collect()
}

/// Words and lines, with "needle" planted often (never overlapping itself).
fn word_text(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed);
    let words: [&[u8]; 8] = [
        b"hay", b"stack", b"needle", b"nee", b"dle", b"hay7", b"needles", b"x",
    ];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(words[r.below(8) as usize]);
        out.push(if r.below(6) == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// All match starts, overlapping; lines with a match start.
fn naive(text: &[u8], pat: &[u8]) -> (Vec<u64>, u64) {
    let mut offsets = Vec::new();
    let mut lines = std::collections::BTreeSet::new();
    let mut line = 0u64;
    for i in 0..text.len() {
        if text[i..].starts_with(pat) {
            offsets.push(i as u64);
            lines.insert(line);
        }
        if text[i] == b'\n' {
            line += 1;
        }
    }
    (offsets, lines.len() as u64)
}

fn check_literal(text: &[u8], pat: &[u8]) {
    let (offsets, lines) = naive(text, pat);
    let kernel = Literal::new(pat, true).unwrap();
    for lanes in [1, 2, 3, 5, 8, 64] {
        for page in [512u64, 4096] {
            for chunk in [1usize, 7, 512, 100_000] {
                if chunk == 1 && lanes > 3 {
                    continue;
                }
                let hits = run_slice(text, &kernel, lanes, page, chunk);
                let what = format!("{pat:?} lanes {lanes} page {page} chunk {chunk}");
                assert_eq!(hits.offsets, offsets, "{what}");
                assert_eq!(hits.matches, offsets.len() as u64, "{what}");
                assert_eq!(hits.lines, lines, "{what}");
            }
        }
    }
}

#[test]
fn literal_equals_naive_with_overlaps_and_boundaries() {
    let text = tiny_text(20_000, 1);
    for pat in [
        &b"a"[..],
        b"aa",
        b"aaaa",
        b"ab",
        b"b a",
        b"a\na",
        b"\n",
        b"abab",
    ] {
        check_literal(&text, pat);
    }
    // Long lines: a line crossing many lanes must be counted once.
    let long: Vec<u8> = tiny_text(20_000, 2)
        .into_iter()
        .map(|b| if b == b'\n' { b'b' } else { b })
        .collect();
    check_literal(&long, b"ab");
    check_literal(&long, b"zz");
    check_literal(b"", b"a");
}

#[test]
fn overlapping_matches_are_all_counted() {
    let hits = run_slice(b"aaaaaaa", &Literal::new(b"aaaa", true).unwrap(), 1, 512, 3);
    assert_eq!(hits.offsets, [0, 1, 2, 3]);
    assert_eq!((hits.matches, hits.lines), (4, 1));
}

#[test]
fn literal_partials_serialise_and_merge_associatively() {
    let text = tiny_text(8192, 3);
    let kernel = Literal::new(b"ab", true).unwrap();
    let parts: Vec<LiteralHits> = [0..2048usize, 2048..4096, 4096..6144, 6144..8192]
        .into_iter()
        .map(|r| {
            use inpath_store::{Kernel, Scan};
            let own = r.start as u64..r.end as u64;
            let reach = kernel.reach(own.clone(), 8192);
            let mut scan = kernel.scan(own, 8192);
            scan.feed(reach.start, &text[reach.start as usize..reach.end as usize]);
            let p = scan.finish();
            let json = serde_json::to_string(&p).unwrap();
            serde_json::from_str(&json).unwrap()
        })
        .collect();
    let [a, b, c, d] = <[LiteralHits; 4]>::try_from(parts).unwrap();
    let left = a.clone().merge(b.clone()).merge(c.clone()).merge(d.clone());
    let right = a.merge(b.merge(c.merge(d)));
    assert_eq!(left, right);
    assert_eq!(left.offsets, naive(&text, b"ab").0);
}

fn grep(args: &[&str], pattern: &str, file: &std::path::Path) -> Option<String> {
    let out = Command::new("grep")
        .args(args)
        .arg("--")
        .arg(pattern)
        .arg(file)
        .env("LC_ALL", "C")
        .output();
    match out {
        Ok(o) => Some(String::from_utf8(o.stdout).unwrap()),
        Err(e) => {
            eprintln!("skipped the grep comparison: cannot run grep: {e}");
            None
        }
    }
}

fn grep_offsets(text: &str) -> Vec<u64> {
    text.lines()
        .map(|l| l.split_once(':').unwrap().0.parse().unwrap())
        .collect()
}

#[test]
fn search_through_the_store_equals_grep() {
    let dir = tempfile::tempdir().unwrap();
    let text = word_text(300_000, 4);
    let path = dir.path().join("words.txt");
    std::fs::write(&path, &text).unwrap();
    let mut store = Store::create(&dir.path().join("store")).unwrap();
    let opts = PutOptions {
        page_size: 1024,
        ..PutOptions::default()
    };
    let entry = store.put_file(&path, None, &opts).unwrap();
    let handle = store.open_handle(entry.handle.into()).unwrap();
    // The mapped path (the default), and the reader's workers with reads of one page and of
    // three pages.
    let readers: Vec<FlashReader> = [(true, 1024u64), (false, 1024), (false, 3 * 1024)]
        .into_iter()
        .map(|(mapped, segment)| {
            FlashReader::new(ReaderConfig {
                workers: 3,
                depth: 8,
                segment,
                mapped,
                ..ReaderConfig::default()
            })
        })
        .collect();
    let (naive_offsets, naive_lines) = naive(&text, b"needle");
    for (r, reader) in readers.iter().enumerate() {
        for lanes in [1, 2, 3, 7] {
            let (hits, stats) = run_counted(
                reader,
                &handle,
                &Literal::new(b"needle", true).unwrap(),
                lanes,
            )
            .unwrap();
            assert_eq!(hits.offsets, naive_offsets, "reader {r} lanes {lanes}");
            assert_eq!(hits.lines, naive_lines, "reader {r} lanes {lanes}");
            assert_eq!(stats.mapped, r == 0);
            assert!(stats.bytes_scanned >= text.len() as u64);
        }
    }
    // Some matches cross a page boundary, so the carry was exercised.
    assert!(naive_offsets.iter().any(|&o| o / 1024 != (o + 5) / 1024));
    if let Some(out) = grep(&["-b", "-o", "-F"], "needle", &path) {
        assert_eq!(grep_offsets(&out), naive_offsets);
    }
    if let Some(out) = grep(&["-c", "-F"], "needle", &path) {
        assert_eq!(out.trim().parse::<u64>().unwrap(), naive_lines);
    }

    // Regex, line by line.
    for pattern in [
        "ne+dle",
        "hay[0-9]",
        "^stack",
        "x$",
        "s\\b",
        "dle\\s+hay",
        "^$",
        "(?i)NEEDLES",
    ] {
        let kernel = RegexSearch::new(pattern, true).unwrap();
        let re = regex::bytes::Regex::new(pattern).unwrap();
        let mut want = RegexHits::default();
        let mut at = 0u64;
        for line in text.split(|&b| b == b'\n') {
            if re.is_match(line) {
                want.lines += 1;
            }
            for m in re.find_iter(line).filter(|m| !m.is_empty()) {
                want.matches += 1;
                want.offsets.push(at + m.start() as u64);
                want.lengths.push(m.len() as u64);
            }
            at += line.len() as u64 + 1;
        }
        for lanes in [1, 2, 5] {
            for reader in &readers {
                let got = run(reader, &handle, &kernel, lanes).unwrap();
                assert_eq!(got, want, "{pattern} lanes {lanes}");
            }
            let mem = run_slice(&text, &kernel, lanes, 1024, 333);
            assert_eq!(mem, want, "{pattern} lanes {lanes} in memory");
        }
        if pattern.starts_with("(?") {
            continue; // inline flags are not POSIX: no grep to compare with
        }
        if let Some(out) = grep(&["-c", "-E"], pattern, &path) {
            assert_eq!(out.trim().parse::<u64>().unwrap(), want.lines, "{pattern}");
        }
        if let Some(out) = grep(&["-b", "-o", "-E"], pattern, &path) {
            assert_eq!(grep_offsets(&out), want.offsets, "{pattern}");
        }
    }
}

/// Patterns whose block matches run past a line's end, anchors, empty matches and inline flags:
/// the block search (the default) equals matching every line alone, for any lanes and chunks.
#[test]
fn regex_block_search_equals_line_by_line() {
    let text = tiny_text(30_000, 9);
    for pattern in [
        "ab", "a\\sb", "[^a]+b", "\\s", "b$", "^b", "^$", "b*", "a{3}", "\\bab\\b", "(?m)^a",
        "\\Ab", "b\\z",
    ] {
        for offsets in [false, true] {
            let block = RegexSearch::new(pattern, offsets).unwrap();
            let alone = RegexSearch::line_by_line(pattern, offsets).unwrap();
            let want = run_slice(&text, &alone, 1, 512, 100_000);
            for (lanes, chunk) in [(1, 100_000), (1, 333), (3, 1000), (8, 64), (2, 1)] {
                let got = run_slice(&text, &block, lanes, 512, chunk);
                assert_eq!(
                    got, want,
                    "{pattern:?} offsets {offsets} lanes {lanes} chunk {chunk}"
                );
            }
        }
    }
}

#[test]
fn regex_lines_follow_grep_rules() {
    // A final line without a newline counts; the empty string after a final newline does not;
    // lines with only empty matches count for -c but give no offsets.
    let k = RegexSearch::new("b*", true).unwrap();
    let hits = run_slice(b"a\nbb\n\nc", &k, 1, 512, 1);
    assert_eq!(hits.lines, 4);
    assert_eq!(hits.offsets, [2]);
    let k = RegexSearch::new("c", false).unwrap();
    assert_eq!(run_slice(b"a\nbb\n\nc", &k, 1, 512, 2).lines, 1);
    assert_eq!(run_slice(b"c\n", &k, 1, 512, 2).lines, 1);
    assert!(RegexSearch::new("(", false).is_err());
}

fn brute_force(items: &[u8], queries: &[u8], is: usize, k: usize) -> Vec<Vec<Neighbour>> {
    queries
        .chunks_exact(is)
        .map(|q| {
            let mut all: Vec<Neighbour> = items
                .chunks_exact(is)
                .enumerate()
                .map(|(i, item)| Neighbour {
                    distance: distance(item, q),
                    index: i as u64,
                })
                .collect();
            all.sort_by_key(|n| (n.distance, n.index));
            all.truncate(k);
            all
        })
        .collect()
}

#[test]
fn hamming_top_k_equals_brute_force_with_ties_to_the_lowest_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    for (is, n, nq, k) in [
        (20usize, 700usize, 11usize, 5usize),
        (64, 300, 17, 3),
        (3, 2000, 9, 40),
    ] {
        let mut r = Rng(is as u64);
        // Items drawn from a small pool, so many distances tie.
        let pool: Vec<Vec<u8>> = (0..13)
            .map(|_| (0..is).map(|_| r.next() as u8).collect())
            .collect();
        let items: Vec<u8> = (0..n)
            .flat_map(|_| pool[r.below(13) as usize].clone())
            .collect();
        let queries: Vec<u8> = (0..nq * is).map(|_| r.next() as u8).collect();
        let want = brute_force(&items, &queries, is, k);
        let kernel = Hamming::new(is, queries.clone(), k).unwrap();
        for lanes in [1, 2, 3, 8] {
            let got = run_slice(&items, &kernel, lanes, 512, 100);
            assert_eq!(got.queries, want, "item size {is} lanes {lanes}");
        }
        let opts = PutOptions {
            page_size: 512,
            ..PutOptions::default()
        };
        let entry = store
            .put_reader(&items[..], &format!("items{is}"), &opts)
            .unwrap();
        let handle = store.open_handle(entry.handle.into()).unwrap();
        kernel.check_size(entry.size).unwrap();
        for lanes in [1, 4] {
            let got = run(&reader, &handle, &kernel, lanes).unwrap();
            assert_eq!(got.queries, want, "store, item size {is} lanes {lanes}");
            let json = serde_json::to_string(&got).unwrap();
            assert_eq!(
                serde_json::from_str::<inpath_store::Neighbours>(&json).unwrap(),
                got
            );
        }
    }
    assert!(Hamming::new(8, vec![0; 12], 1).is_err());
    assert!(Hamming::new(4, vec![0; 4], 3)
        .unwrap()
        .check_size(10)
        .is_err());
}
