//! The join's indexes (bitmap, positional, sorted) and radix sort against plain references.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A small deterministic generator (xorshift), so the properties run on fixed inputs.
fn values(seed: u64, n: usize, modulo: i64) -> Vec<i64> {
    inpath_table::testing::xorshift(seed, n, -(modulo / 3), modulo as u64)
}

#[test]
fn sorter_output_is_a_sorted_stable_permutation() {
    for (seed, n, modulo) in [(1, 0, 5), (2, 1, 5), (3, 1000, 7), (4, 5000, 1 << 40)] {
        let keys = values(seed, n, modulo);
        let (sorted, rows) = radix_sort_pairs(&keys);
        let mut want: Vec<(i64, u32)> = keys.iter().zip(0u32..).map(|(&k, r)| (k, r)).collect();
        want.sort();
        let got: Vec<(i64, u32)> = sorted.into_iter().zip(rows).collect();
        assert_eq!(got, want, "seed {seed}");
    }
    let extremes = vec![i64::MAX, i64::MIN, 0, -1, 1, i64::MIN];
    let (sorted, _) = radix_sort_pairs(&extremes);
    let mut want = extremes.clone();
    want.sort();
    assert_eq!(sorted, want);
}

/// Nested loops: the reference every join method must equal.
fn reference(build: &[i64], probe: &[i64], kind: JoinKind) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for (i, p) in probe.iter().enumerate() {
        let hits: Vec<u32> = (0..build.len() as u32)
            .filter(|&b| build[b as usize] == *p)
            .collect();
        match kind {
            JoinKind::Inner => out.extend(hits.iter().map(|&b| (i as u32, b))),
            JoinKind::Semi if !hits.is_empty() => out.push((i as u32, u32::MAX)),
            JoinKind::Anti if hits.is_empty() => out.push((i as u32, u32::MAX)),
            _ => {}
        }
    }
    out
}

#[test]
fn every_join_method_equals_an_equi_join_duplicates_included() {
    // Keys within 32 bits are kept narrow; offset beyond them, wide.
    for offset in [0, 1 << 40] {
        join_methods_equal_an_equi_join(offset);
    }
}

#[test]
fn ints_narrow_until_a_value_needs_64_bits() {
    let mut ints = Ints::from(vec![1, -2, i32::MAX as i64]);
    assert!(matches!(ints, Ints::Narrow(_)));
    assert_eq!(ints.bytes(), 12);
    ints.extend(&[i32::MIN as i64 - 1]);
    assert!(matches!(ints, Ints::Wide(_)));
    ints.append(Ints::from(vec![7]));
    assert_eq!(
        ints.to_vec(),
        vec![1, -2, i32::MAX as i64, i32::MIN as i64 - 1, 7]
    );
    assert_eq!(ints.gather(&[4, 0, 3]), vec![7, 1, i32::MIN as i64 - 1]);
    assert_eq!(ints.last(), Some(7));
    let mut narrow = Ints::from(vec![3]);
    narrow.append(Ints::from(vec![1 << 33]));
    assert_eq!(narrow.to_vec(), vec![3, 1 << 33]);
    assert_eq!(Ints::default().last(), None);
}

fn join_methods_equal_an_equi_join(offset: i64) {
    let shift = |v: Vec<i64>| -> Vec<i64> { v.into_iter().map(|x| x + offset).collect() };
    let unique_dense: Vec<i64> = {
        let mut v: Vec<i64> = (10..410).collect();
        v.reverse();
        shift(v)
    };
    let sorted_dups: Vec<i64> = shift((0..600).map(|i| i / 3 * 2).collect());
    let random_dups = shift(values(9, 700, 300));
    let mut ascending_probe = shift(values(11, 900, 500));
    ascending_probe.sort();
    let probes = [shift(values(10, 900, 500)), ascending_probe];
    let cases = [
        (&unique_dense, "positional"),
        (&sorted_dups, "merge"),
        (&random_dups, "sort-merge"),
    ];
    for (build, method) in cases {
        let built = Built::new(
            vec![Kept::Int(build.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Auto,
            false,
        )
        .unwrap();
        assert_eq!(built.method(), method);
        assert_eq!(built.unique_keys(), method == "positional", "{method}");
        // Without room for the positional slots, sorted pairs (and the same answers).
        let tight = Built::within(
            vec![Kept::Int(build.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Auto,
            false,
            1000,
        )
        .unwrap();
        assert_ne!(tight.method(), "positional");
        assert_eq!(tight.unique_keys(), method == "positional", "{method}");
        let merged = Built::new(
            vec![Kept::Int(build.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Merge,
            false,
        )
        .unwrap();
        let present = Built::new(
            vec![Kept::Int(build.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Auto,
            true,
        )
        .unwrap();
        assert_eq!(present.method(), "bitmap");
        for probe in &probes {
            for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
                let want = reference(build, probe, kind);
                let mut methods = vec![&built, &merged, &tight];
                if kind != JoinKind::Inner {
                    methods.push(&present);
                }
                for b in methods {
                    let (take, rows) = b.probe(probe, None, kind);
                    let mut got: Vec<(u32, u32)> = if kind == JoinKind::Inner {
                        take.into_iter().zip(rows).collect()
                    } else {
                        take.into_iter().map(|t| (t, u32::MAX)).collect()
                    };
                    got.sort();
                    assert_eq!(got, want, "{method} ({}) {kind:?}", b.method());
                }
            }
        }
    }
    let err = Built::new(
        vec![Kept::Int(sorted_dups.into())],
        Vec::new(),
        &[0],
        JoinMethod::Positional,
        false,
    );
    assert!(err.is_err());
}

#[test]
fn two_column_keys_join_as_pairs_and_keys_beyond_32_bits_never_match() {
    let (mut a, b) = (values(21, 400, 20), values(22, 400, 30));
    a[0] = 0;
    let built = Built::new(
        vec![Kept::Int(a.clone().into()), Kept::Int(b.clone().into())],
        Vec::new(),
        &[0, 1],
        JoinMethod::Auto,
        false,
    )
    .unwrap();
    let (mut pa, mut pb) = (values(23, 300, 20), values(24, 300, 30));
    pa[0] = 1 << 40; // would pack to the same bits as 0
    pb[0] = b[0];
    pa[1] = a[5];
    pb[1] = b[5];
    let (keys, packs) = pack_keys(vec![pa.clone(), pb.clone()]);
    for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
        let (take, rows) = built.probe(&keys, packs.as_deref(), kind);
        let mut got: Vec<(u32, u32)> = if kind == JoinKind::Inner {
            take.into_iter().zip(rows).collect()
        } else {
            take.into_iter().map(|t| (t, u32::MAX)).collect()
        };
        got.sort();
        let mut want = Vec::new();
        for i in 0..pa.len() {
            let hits: Vec<u32> = (0..a.len() as u32)
                .filter(|&r| a[r as usize] == pa[i] && b[r as usize] == pb[i])
                .collect();
            match kind {
                JoinKind::Inner => want.extend(hits.iter().map(|&r| (i as u32, r))),
                JoinKind::Semi if !hits.is_empty() => want.push((i as u32, u32::MAX)),
                JoinKind::Anti if hits.is_empty() => want.push((i as u32, u32::MAX)),
                _ => {}
            }
        }
        assert_eq!(got, want, "{kind:?}");
    }
    let wide = Built::new(
        vec![Kept::Int(vec![1 << 40].into()), Kept::Int(vec![1].into())],
        Vec::new(),
        &[0, 1],
        JoinMethod::Auto,
        false,
    );
    assert!(matches!(wide, Err(Error::DeviceDeclined { .. })));
}

/// Builds summarized as the lanes summarize them (one row per run of equal keys, runs cut
/// where a lane's pages end), for keys in order and not: a residual semi or anti join
/// equals a nested loop over the rows themselves, at every method.
#[test]
fn residual_semi_and_anti_joins_equal_a_nested_loop_over_the_rows_runs_summarize() {
    let n = 800;
    let in_order: Vec<i64> = (0..n as i64).map(|i| i / 4).collect();
    let random = values(22, n, 150);
    let vals = values(21, n, 5);
    let probe_keys = values(23, 600, 240);
    let probe_vals = values(24, 600, 5);
    for build_keys in [&in_order, &random] {
        for lanes_rows in [1, 3, n] {
            let (mut k, mut v) = (Vec::new(), Vec::new());
            for start in (0..n).step_by(lanes_rows) {
                let mut last: Option<usize> = None;
                for i in start..(start + lanes_rows).min(n) {
                    match last.filter(|&l| k[l] == build_keys[i]) {
                        Some(l) => {
                            if residual_first(v[l]) != vals[i] {
                                v[l] |= 1;
                            }
                        }
                        None => {
                            k.push(build_keys[i]);
                            v.push(encode_residual(vals[i]).unwrap());
                            last = Some(k.len() - 1);
                        }
                    }
                }
            }
            for method in [JoinMethod::Auto, JoinMethod::Merge] {
                let built = Built::new(
                    vec![Kept::Int(k.clone().into()), Kept::Int(v.clone().into())],
                    Vec::new(),
                    &[0],
                    method,
                    false,
                )
                .unwrap();
                for kind in [JoinKind::Semi, JoinKind::Anti] {
                    let got = built
                        .probe_residual(&probe_keys, None, kind, &probe_vals, 1)
                        .unwrap();
                    let want: Vec<u32> = (0..probe_keys.len())
                        .filter(|&i| {
                            let other = (0..n).any(|j| {
                                build_keys[j] == probe_keys[i] && vals[j] != probe_vals[i]
                            });
                            other == (kind == JoinKind::Semi)
                        })
                        .map(|i| i as u32)
                        .collect();
                    assert_eq!(
                        got,
                        want,
                        "{kind:?}, {} rows a lane, {}",
                        lanes_rows,
                        built.method()
                    );
                    assert!(!want.is_empty());
                }
            }
        }
    }
    assert_eq!(encode_residual(i64::MAX / 2 + 1), None);
    for x in [-7, 0, 5, i64::MAX / 2, i64::MIN / 2] {
        let e = encode_residual(x).unwrap();
        assert_eq!((residual_first(e), residual_several(e)), (x, false));
        assert_eq!((residual_first(e | 1), residual_several(e | 1)), (x, true));
    }
}

/// A key that arrived sorted is indexed where it is kept (no copy), and takes positional
/// slots only where they cost no more than the rows kept or an eighth of the memory left:
/// orders' keys (a quarter of their range) merge, customers' (all of it) are looked up.
#[test]
fn sorted_keys_are_not_copied_and_positional_slots_stay_within_their_share() {
    let quarter: Vec<i64> = (0..40_000).map(|i| i * 4).collect();
    let dense: Vec<i64> = (1..=40_000).collect();
    let build = |keys: &Vec<i64>, budget: u64| {
        Built::within(
            vec![Kept::Int(keys.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Auto,
            false,
            budget,
        )
        .unwrap()
    };
    let merged = build(&quarter, 2 << 20);
    assert_eq!(merged.method(), "merge");
    // The kept keys (4 bytes each), a presence bitmap over their range, every 16th key (8
    // bytes each), and the keys below each bitmap word (the keys are unique: 4 bytes a word).
    assert_eq!(
        merged.bytes(),
        40_000 * 4 + 160_000 / 8 + 40_000 / 16 * 8 + 160_000 / 64 * 4
    );
    assert!(merged.unique_keys());
    let (take, rows) = merged.probe(&[8, 9, 159_996], None, JoinKind::Inner);
    assert_eq!((take, rows), (vec![0, 2], vec![2, 39_999]));
    // Slots of 640 KB against 160 KB kept: taken only with 5 MiB or more left.
    assert_eq!(build(&quarter, 4 << 20).method(), "merge");
    assert_eq!(build(&quarter, 8 << 20).method(), "positional");
    assert_eq!(build(&dense, 1 << 20).method(), "positional");
}

/// A search through the fences finds, for every key, the position a binary search of the
/// whole finds: sorted keys with duplicates and gaps, of every length around the fence width,
/// for keys below, among, between and beyond them; galloping agrees where it answers.
#[test]
fn fenced_and_galloping_searches_find_the_first_key_not_below() {
    let mut r = StdRng::seed_from_u64(9);
    for n in [0usize, 1, 2, 15, 16, 17, 31, 32, 33, 100, 1000, 5000] {
        let mut keys: Vec<i64> = (0..n).map(|_| r.gen_range(-50..2000)).collect();
        keys.sort_unstable();
        let f = fences(&keys);
        for k in -60..2010 {
            let want = keys.partition_point(|&x| x < k);
            assert_eq!(fenced(&keys, &f, k), want, "n {n}, k {k}");
            for from in [0, want / 2, want] {
                if let Some(at) = gallop(&keys, from, k) {
                    assert_eq!(at, want, "n {n}, k {k}, from {from}");
                }
            }
        }
    }
}

/// A presence bitmap is kept as the data grows, within a sixteenth of the memory a build has
/// left: 2,000 keys spread over 2 M (TPC-H Q17's parts at SF 10) are past the fixed bound of
/// 1 Mi bits beyond 64 a key, and get a bitmap of 256 KB once 4 MiB are left (for keys that
/// arrived sorted, an eighth of the budget: 32 MiB); a semi join's keys become a bitmap index
/// of their own. Probes answer the same with and without it.
#[test]
fn presence_bitmaps_grow_with_the_memory_left() {
    let keys: Vec<i64> = (0..2_000).map(|i| i * 1_000 + 7).collect();
    let build = |budget: u64, presence_only: bool| {
        Built::within(
            vec![Kept::Int(keys.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Auto,
            presence_only,
            budget,
        )
        .unwrap()
    };
    let has_presence = |b: &Built| {
        matches!(
            &b.index,
            Index::Sorted {
                present: Some(_),
                ..
            }
        )
    };
    let (small, large) = (build(1 << 20, false), build(32 << 20, false));
    assert!(!has_presence(&small));
    assert!(has_presence(&large));
    assert_eq!(small.method(), "merge");
    assert_eq!(build(1 << 20, true).method(), "merge");
    assert_eq!(build(32 << 20, true).method(), "bitmap");
    let probe: Vec<i64> = (0..3_000_000).step_by(333).collect();
    for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
        let want = small.probe(&probe, None, kind);
        assert_eq!(large.probe(&probe, None, kind), want, "{kind:?}");
        if kind != JoinKind::Inner {
            assert_eq!(build(32 << 20, true).probe(&probe, None, kind).0, want.0);
        }
    }
}

/// Unique keys with a presence bitmap find a present key's place by counting (ranks), not by
/// searching: for keys that arrived sorted and keys radix-sorted here, probed in any order,
/// every kind of join answers as a brute-force reference does. Keys with duplicates get no
/// ranks (a count of keys is not a place among rows).
#[test]
fn ranks_over_a_presence_bitmap_place_unique_keys_as_a_search_does() {
    let mut r = StdRng::seed_from_u64(59);
    let sparse: Vec<i64> = (0..3_000).map(|i| i * 37 + (i % 5) - 40).collect();
    let mut shuffled = sparse.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, r.gen_range(0..=i));
    }
    let mut dups = sparse.clone();
    dups.extend(sparse.iter().step_by(3));
    let probe: Vec<i64> = (0..40_000)
        .map(|_| r.gen_range(-100..3_000 * 37 + 100))
        .chain(sparse.iter().rev().copied())
        .collect();
    for (keys, ranked) in [(&sparse, true), (&shuffled, true), (&dups, false)] {
        let built = Built::within(
            vec![Kept::Int(keys.clone().into())],
            Vec::new(),
            &[0],
            JoinMethod::Merge,
            false,
            32 << 20,
        )
        .unwrap();
        let ranks = match &built.index {
            Index::Sorted {
                present: Some(_),
                ranks,
                ..
            } => ranks.len(),
            other => panic!("not a sorted index with a bitmap: {other:?}"),
        };
        assert_eq!(ranks > 0, ranked, "ranked {ranked}");
        for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
            let (take, rows) = built.probe(&probe, None, kind);
            let mut want_take = Vec::new();
            let mut want_rows = Vec::new();
            for (i, k) in probe.iter().enumerate() {
                let mut matches: Vec<u32> = (0..keys.len() as u32)
                    .filter(|&b| keys[b as usize] == *k)
                    .collect();
                matches.sort_unstable();
                match kind {
                    JoinKind::Inner => {
                        for b in matches {
                            want_take.push(i as u32);
                            want_rows.push(b);
                        }
                    }
                    JoinKind::Semi if !matches.is_empty() => want_take.push(i as u32),
                    JoinKind::Anti if matches.is_empty() => want_take.push(i as u32),
                    _ => {}
                }
            }
            let mut got: Vec<(u32, u32)> = take.iter().copied().zip(rows.iter().copied()).collect();
            let mut want: Vec<(u32, u32)> = want_take.iter().copied().zip(want_rows).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(take.len(), want_take.len(), "{kind:?}, ranked {ranked}");
            if kind == JoinKind::Inner {
                assert_eq!(got, want, "{kind:?}, ranked {ranked}");
            } else {
                assert_eq!(take, want_take, "{kind:?}, ranked {ranked}");
            }
        }
    }
}

/// Two-column keys whose first column is dense with short runs take the runs index: a unique
/// first key (suppliers by key and nation), two to four rows a first key grouped (a part's
/// suppliers) or shuffled. Every join kind equals nested loops over the pairs, `unique_keys`
/// says whether a pair repeats, and the same builds searched as sorted pairs (no room, or
/// JoinMethod::Merge) answer alike. A first key with long runs or spread over a wide range
/// keeps the sorted pairs.
#[test]
fn two_column_keys_with_a_dense_first_key_take_the_runs_index() {
    let mut r = StdRng::seed_from_u64(61);
    let suppliers: Vec<(i64, i64)> = (1..=500).map(|k| (k, r.gen_range(0..25))).collect();
    let parts: Vec<(i64, i64)> = (1..=300)
        .flat_map(|p| (0..r.gen_range(2..=4)).map(move |s| (p, (p * 7 + s * 13) % 97)))
        .collect();
    let mut shuffled = parts.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, r.gen_range(0..=i));
    }
    // A pair repeated: not unique, and both rows match.
    let mut repeated = parts.clone();
    repeated.push(parts[10]);
    let long_runs: Vec<(i64, i64)> = (0..2000).map(|i| (i % 50, i)).collect();
    let sparse: Vec<(i64, i64)> = (0..300).map(|i| (i * 1000, i % 5)).collect();
    let cases = [
        ("suppliers", &suppliers, "positional", true),
        ("parts", &parts, "positional", true),
        ("shuffled", &shuffled, "positional", true),
        ("repeated", &repeated, "positional", false),
        ("long runs", &long_runs, "sort-merge", true),
        ("sparse", &sparse, "merge", true),
    ];
    let pack = |(a, b): (i64, i64)| pack_keys(vec![vec![a], vec![b]]).0[0];
    for (name, build, method, unique) in cases {
        let columns = || {
            vec![
                Kept::Int(build.iter().map(|p| p.0).collect::<Vec<_>>().into()),
                Kept::Int(build.iter().map(|p| p.1).collect::<Vec<_>>().into()),
            ]
        };
        // (A real budget: sorted pairs take a presence bitmap over their packed range within
        // a sixteenth of it.)
        let ample = 64 << 20;
        let built = Built::within(
            columns(),
            Vec::new(),
            &[0, 1],
            JoinMethod::Auto,
            false,
            ample,
        )
        .unwrap();
        assert_eq!(built.method(), method, "{name}");
        assert_eq!(built.unique_keys(), unique, "{name}");
        let tight =
            Built::within(columns(), Vec::new(), &[0, 1], JoinMethod::Auto, false, 64).unwrap();
        let merge = Built::within(
            columns(),
            Vec::new(),
            &[0, 1],
            JoinMethod::Merge,
            false,
            ample,
        )
        .unwrap();
        assert_ne!(tight.method(), "positional", "{name}");
        assert_ne!(merge.method(), "positional", "{name}");
        // Probes: every build pair, pairs off by one in either key, first keys beyond the range.
        let mut probe: Vec<(i64, i64)> = build.clone();
        probe.extend(build.iter().map(|&(a, b)| (a, b + 1)));
        probe.extend(build.iter().map(|&(a, b)| (a + 1, b)));
        probe.extend([(-5, 0), (i32::MAX as i64, 1), (0, -1)]);
        for i in (1..probe.len()).rev() {
            probe.swap(i, r.gen_range(0..=i));
        }
        let build_keys: Vec<i64> = build.iter().map(|&p| pack(p)).collect();
        let probe_keys: Vec<i64> = probe.iter().map(|&p| pack(p)).collect();
        for kind in [JoinKind::Inner, JoinKind::Semi, JoinKind::Anti] {
            let want = reference(&build_keys, &probe_keys, kind);
            for (how, b) in [("auto", &built), ("tight", &tight), ("merge", &merge)] {
                let (take, rows) = b.probe(&probe_keys, None, kind);
                let mut got: Vec<(u32, u32)> = match kind {
                    JoinKind::Inner => take.into_iter().zip(rows).collect(),
                    _ => take.into_iter().map(|i| (i, u32::MAX)).collect(),
                };
                got.sort_unstable();
                let mut want = want.clone();
                want.sort_unstable();
                assert_eq!(got, want, "{name}, {how}, {kind:?}");
            }
        }
    }
}
