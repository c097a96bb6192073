//! LSH by bit sampling: recall on planted near-duplicates, exact distances for what it returns,
//! the index file's checks (missing, damaged, other version, stale), parameter ranges.

use inpath_store::hamming::distance;
use inpath_store::lsh::{self, LshIndex, LshParams};
use inpath_store::{FlashReader, HammingKernel, PutOptions, ReaderConfig, Store};

use crate::common::Rng;

/// Random items, and queries that are some of them with `flips` random bits flipped.
fn planted(
    is: usize,
    n: usize,
    nq: usize,
    flips: usize,
    seed: u64,
) -> (Vec<u8>, Vec<u8>, Vec<u64>) {
    let mut r = Rng(seed);
    let items = r.bytes(is * n);
    let mut queries = Vec::with_capacity(nq * is);
    let mut truth = Vec::with_capacity(nq);
    for _ in 0..nq {
        let i = r.next() % n as u64;
        let mut q = items[i as usize * is..(i as usize + 1) * is].to_vec();
        for _ in 0..flips {
            let bit = (r.next() % (is as u64 * 8)) as usize;
            q[bit / 8] ^= 1 << (bit % 8);
        }
        queries.extend_from_slice(&q);
        truth.push(i);
    }
    (items, queries, truth)
}

/// The exact nearest item of each query (ties to the lowest index).
fn exact_nn(items: &[u8], queries: &[u8], is: usize) -> Vec<(u64, u32)> {
    queries
        .chunks_exact(is)
        .map(|q| {
            items
                .chunks_exact(is)
                .enumerate()
                .map(|(i, x)| (distance(x, q), i as u64))
                .min()
                .map(|(d, i)| (i, d))
                .unwrap()
        })
        .collect()
}

#[test]
fn recall_at_1_on_planted_near_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    // (item size, items, flipped bits: 2-3% of the bits)
    for (is, n, flips) in [(256usize, 3000usize, 50usize), (8192, 300, 1500)] {
        let (items, queries, _) = planted(is, n, 200, flips, is as u64);
        let entry = store
            .put_reader(&items[..], &format!("codes{is}"), &PutOptions::default())
            .unwrap();
        let handle = store.open_handle(entry.handle.into()).unwrap();
        let (index, stats) =
            LshIndex::build(&reader, &handle, is, LshParams::default(), 2).unwrap();
        assert_eq!(stats.bytes_scanned, items.len() as u64);
        index
            .save(&LshIndex::path(dir.path(), entry.handle))
            .unwrap();
        let index = LshIndex::load(dir.path(), &handle, Some(is)).unwrap();
        let want = exact_nn(&items, &queries, is);
        for kernel in HammingKernel::available() {
            let (got, st) = index.search(&handle, &queries, 3, 0, kernel).unwrap();
            let hits = got
                .queries
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.first().map(|n| (n.index, n.distance)) == Some(**w))
                .count();
            let recall = hits as f64 / want.len() as f64;
            assert!(recall >= 0.95, "item size {is}: recall@1 {recall}");
            // Far fewer candidates than items, and every distance exact.
            assert!(st.candidates < (n * 200 / 4) as u64, "{st:?}");
            assert_eq!(st.bytes_read, st.candidates * is as u64);
            for (g, q) in got.queries.iter().zip(queries.chunks_exact(is)) {
                assert!(g.len() <= 3);
                assert!(g.windows(2).all(|w| w[0] < w[1]));
                for nb in g {
                    let i = nb.index as usize;
                    assert_eq!(nb.distance, distance(&items[i * is..(i + 1) * is], q));
                }
            }
            // Multi-probe looks in more buckets and finds at least as much.
            let (got1, st1) = index.search(&handle, &queries, 3, 1, kernel).unwrap();
            assert!(st1.candidates >= st.candidates && st1.buckets_probed > st.buckets_probed);
            let hits1 = got1
                .queries
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.first().map(|n| (n.index, n.distance)) == Some(**w))
                .count();
            assert!(hits1 >= hits);
        }
    }
}

#[test]
fn builds_are_the_same_for_any_lane_count_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    let is = 100; // items cross page boundaries
    let (items, _, _) = planted(is, 777, 1, 0, 9);
    let opts = PutOptions {
        page_size: 512,
        ..PutOptions::default()
    };
    let entry = store.put_reader(&items[..], "c", &opts).unwrap();
    let handle = store.open_handle(entry.handle.into()).unwrap();
    let params = LshParams {
        tables: 5,
        bits: 11,
        seed: 3,
    };
    let one = LshIndex::build(&reader, &handle, is, params, 1).unwrap().0;
    for lanes in [2, 3, 8] {
        let other = LshIndex::build(&reader, &handle, is, params, lanes)
            .unwrap()
            .0;
        assert_eq!(one.as_bytes(), other.as_bytes(), "lanes {lanes}");
    }
    let path = dir.path().join("x.lsh");
    assert_eq!(LshIndex::from_bytes(one.as_bytes(), &path).unwrap(), one);
    // The positions are distinct, sorted within a table, and fixed by the seed.
    let pos = params.positions(is);
    assert_eq!(pos.len(), 55);
    for t in pos.chunks_exact(11) {
        assert!(t.windows(2).all(|w| w[0] < w[1]) && t[10] < 800);
    }
    assert_eq!(pos, params.positions(is));
    assert_ne!(pos, LshParams { seed: 4, ..params }.positions(is));
}

#[test]
fn index_files_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    let is = 32;
    let (items, queries, _) = planted(is, 500, 2, 3, 1);
    let entry = store
        .put_reader(&items[..], "c", &PutOptions::default())
        .unwrap();
    let handle = store.open_handle(entry.handle.into()).unwrap();
    let path = LshIndex::path(dir.path(), entry.handle);
    let err = |h: &inpath_store::OpenHandle, is| {
        LshIndex::load(dir.path(), h, is).unwrap_err().to_string()
    };
    let e = err(&handle, Some(is));
    assert!(
        e.contains("has no LSH index") && e.contains("inpath store index"),
        "{e}"
    );
    assert!(e.contains("--item-size 32"), "{e}");

    let index = LshIndex::build(&reader, &handle, is, LshParams::default(), 1)
        .unwrap()
        .0;
    index.save(&path).unwrap();
    assert!(LshIndex::load(dir.path(), &handle, None).is_ok());
    let e = err(&handle, Some(16));
    assert!(e.contains("built for 32-byte items, not 16"), "{e}");

    let good = std::fs::read(&path).unwrap();
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not an index at all".to_vec(), "not an LSH index"),
        (good[..40].to_vec(), "truncated"),
        (good[..good.len() - 9].to_vec(), "header announces"),
    ];
    let mut v = good.clone();
    v[8] = 2;
    cases.push((v, "format version 2"));
    let mut v = good.clone();
    v[50] ^= 1;
    cases.push((v, "header fails its CRC-32"));
    let mut v = good.clone();
    let mid = good.len() / 2;
    v[mid] ^= 0x10;
    cases.push((v, "tables fail their CRC-32"));
    for (bytes, want) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let e = err(&handle, Some(is));
        assert!(e.contains(want) && e.contains(".lsh"), "{want}: {e}");
        assert!(e.contains("build it again"), "{e}");
    }

    // Stale: the handle was put again (a new generation) after the index was built.
    index.save(&path).unwrap();
    let mut items2 = items.clone();
    items2.extend_from_slice(&[7; 32]);
    store
        .put_reader(&items2[..], "c", &PutOptions::default())
        .unwrap();
    let handle2 = store.open_handle(entry.handle.into()).unwrap();
    let e = err(&handle2, Some(is));
    assert!(
        e.contains("stale") && e.contains("rebuild it: inpath store index"),
        "{e}"
    );
    // An index of another generation is refused by search too.
    assert!(index
        .search(&handle2, &queries, 1, 0, HammingKernel::best())
        .is_err());
}

#[test]
fn bad_parameters_name_the_valid_range() {
    let p = |tables, bits| LshParams {
        tables,
        bits,
        seed: 1,
    };
    let e = p(0, 8).check(32).unwrap_err().to_string();
    assert!(e.contains("LSH tables = 0") && e.contains("1 to 64"), "{e}");
    let e = p(65, 8).check(32).unwrap_err().to_string();
    assert!(e.contains("1 to 64"), "{e}");
    let e = p(4, 33).check(32).unwrap_err().to_string();
    assert!(e.contains("LSH bits = 33") && e.contains("1 to 32"), "{e}");
    let e = p(4, 9).check(1).unwrap_err().to_string();
    assert!(e.contains("1 to 8"), "{e}");
    assert!(p(4, 0).check(1).is_err());
    assert!(p(lsh::MAX_TABLES, lsh::MAX_BITS).check(4).is_ok());

    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    let entry = store
        .put_reader(&[0u8; 100][..], "c", &PutOptions::default())
        .unwrap();
    let handle = store.open_handle(entry.handle.into()).unwrap();
    let e = LshIndex::build(&reader, &handle, 8, LshParams::default(), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("divisor of the handle's size"), "{e}");
    let index = LshIndex::build(&reader, &handle, 10, p(2, 8), 1).unwrap().0;
    let s = |q: &[u8], k, probe| {
        index
            .search(&handle, q, k, probe, HammingKernel::best())
            .unwrap_err()
            .to_string()
    };
    assert!(s(&[0; 7], 1, 0).contains("multiple of the item size"));
    assert!(s(&[0; 10], 0, 0).contains("k = 0"));
    assert!(s(&[0; 10], 1, 3).contains("0 to 2"));
    // Every item is identical: one bucket; k larger than the items gives them all.
    let (got, _) = index
        .search(&handle, &[0; 10], 50, 0, HammingKernel::best())
        .unwrap();
    assert_eq!(got.queries[0].len(), 10);
    assert_eq!(got.queries[0][0].index, 0);
}
