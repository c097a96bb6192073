//! Unit tests of the device internals.

use super::compare::{like, LikeMatcher};
use super::finish::ordered_rows;
use super::lane::LanePages;
use super::transform::year_of_days;
use super::*;
use crate::graph::{Order, SortKey};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, Date32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::AtomicUsize;

/// A run is read in its order; lanes sharing a queue read every page exactly once between
/// them, however the threads interleave.
#[test]
fn lane_pages_read_every_page_once() {
    let run = LanePages::Run(vec![7, 3, 9]);
    let mut taken = 0;
    let read: Vec<usize> = std::iter::from_fn(|| run.next(&mut taken)).collect();
    assert_eq!(read, [7, 3, 9]);
    assert_eq!(run.next(&mut taken), None);

    let pages: Vec<usize> = (0..10_000).map(|p| p * 3 + 1).collect();
    let queue = Arc::new((pages.clone(), AtomicUsize::new(0)));
    let mut read: Vec<usize> = std::thread::scope(|scope| {
        let lanes: Vec<_> = (0..4)
            .map(|_| {
                let source = LanePages::Shared(queue.clone());
                scope.spawn(move || {
                    let mut taken = 0;
                    let mut mine = Vec::new();
                    while let Some(page) = source.next(&mut taken) {
                        mine.push(page);
                    }
                    // Pages come in queue order within a lane.
                    assert!(mine.windows(2).all(|w| w[0] < w[1]));
                    mine
                })
            })
            .collect();
        lanes.into_iter().flat_map(|l| l.join().unwrap()).collect()
    });
    read.sort_unstable();
    assert_eq!(read, pages);
}

/// Counted groups' rows ordered by every key as Arrow sorts them (strings by bytes,
/// descending, nulls placed), and a limit keeping the rows tied with the last on every key.
#[test]
fn ordered_rows_sort_by_every_key_and_keep_ties_under_a_limit() {
    let names: ArrayRef = Arc::new(arrow_array::StringArray::from(vec![
        Some("b"),
        Some("a"),
        None,
        Some("c"),
        Some("a"),
    ]));
    let counts: ArrayRef = Arc::new(Int64Array::from(vec![3, 3, 1, 5, 2]));
    let schema = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("count", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(schema, vec![names, counts]).unwrap();
    let key = |column, descending, nulls_first| SortKey {
        column,
        descending,
        nulls_first,
    };
    let text = |b: &RecordBatch| -> Vec<(Option<String>, i64)> {
        let n = b.column(0).as_string::<i32>();
        let c = b.column(1).as_primitive::<Int64Type>();
        (0..b.num_rows())
            .map(|i| (n.is_valid(i).then(|| n.value(i).to_string()), c.value(i)))
            .collect()
    };
    let s = |v: &str| Some(v.to_string());
    let by_count_then_name = Order {
        keys: vec![key(1, true, false), key(0, false, true)],
        limit: None,
    };
    assert_eq!(
        text(&ordered_rows(&batch, &by_count_then_name).unwrap()),
        vec![
            (s("c"), 5),
            (s("a"), 3),
            (s("b"), 3),
            (s("a"), 2),
            (None, 1)
        ]
    );
    let names_last_first = Order {
        keys: vec![key(0, true, false), key(1, false, false)],
        limit: None,
    };
    assert_eq!(
        text(&ordered_rows(&batch, &names_last_first).unwrap()),
        vec![
            (s("c"), 5),
            (s("b"), 3),
            (s("a"), 2),
            (s("a"), 3),
            (None, 1)
        ]
    );
    // TOPK 2 by count: the two counts of 3 tie for second place, both sent.
    let top_two = Order {
        keys: vec![key(1, true, false)],
        limit: Some(2),
    };
    let mut got = text(&ordered_rows(&batch, &top_two).unwrap());
    got[1..].sort();
    assert_eq!(got, vec![(s("c"), 5), (s("a"), 3), (s("b"), 3)]);
    // A limit beyond the rows keeps them all; a key beyond the columns is an error.
    let all = Order {
        keys: vec![key(1, false, false)],
        limit: Some(9),
    };
    assert_eq!(ordered_rows(&batch, &all).unwrap().num_rows(), 5);
    let beyond = Order {
        keys: vec![key(2, false, false)],
        limit: None,
    };
    assert!(ordered_rows(&batch, &beyond)
        .unwrap_err()
        .to_string()
        .contains("no column 2"));
}

#[test]
fn years_of_days_equal_arrows_date_part() {
    use arrow_arith::temporal::{date_part, DatePart};
    let days: Vec<i32> = (-800_000..800_000)
        .step_by(7)
        .chain([-1, 0, 59, 60, 11_016, 11_017])
        .collect();
    let array = Date32Array::from(days.clone());
    let want = date_part(&array, DatePart::Year).unwrap();
    let want = want.as_primitive::<Int32Type>();
    for (i, &d) in days.iter().enumerate() {
        assert_eq!(year_of_days(d as i64), want.value(i) as i64, "day {d}");
    }
}

/// Patterns of `%` and literal parts read once (`LikeMatcher::Parts`) match as the general
/// matcher does, over every string of up to 6 letters of {a, b} and random patterns.
#[test]
fn like_parts_match_as_the_general_matcher() {
    let strings: Vec<String> = (0..=6u32)
        .flat_map(|n| {
            (0..1u32 << n).map(move |bits| {
                (0..n)
                    .map(|i| if bits >> i & 1 == 1 { 'b' } else { 'a' })
                    .collect()
            })
        })
        .collect();
    let mut r = StdRng::seed_from_u64(7);
    for _ in 0..400 {
        let len = r.gen_range(2..8);
        let pattern: String = (0..len)
            .map(|_| match r.gen_range(0..3) {
                0 => '%',
                1 => 'a',
                _ => 'b',
            })
            .collect();
        let m = LikeMatcher::new(&pattern);
        for s in &strings {
            assert_eq!(m.matches(s), like(s, &pattern), "{s:?} LIKE {pattern:?}");
        }
    }
}

#[test]
fn like_matches_sql_patterns() {
    for (text, pattern, want) in [
        ("PROMO BRUSHED TIN", "PROMO%", true),
        ("STANDARD BRASS", "%BRASS", true),
        ("forest green", "%green%", true),
        ("abc", "a_c", true),
        ("abc", "a_", false),
        ("", "%", true),
        ("", "_", false),
        ("aaa", "%a%a%a%", true),
        ("aa", "%a%a%a%", false),
        ("special requests", "%special%requests%", true),
        ("13-719-553-3346", "13%", true),
        ("1", "13%", false),
        ("", "", true),
        ("a", "", false),
        ("%", "%", true),
        ("ab", "%b", true),
        ("ab", "%a", false),
        ("crème brûlée", "crème%", true),
        ("crème brûlée", "cr_me%", true),
        ("crème brûlée", "%br_l%", true),
        ("crème", "cr_e", false),
        ("requests special", "%special%requests%", false),
        ("abab", "ab%ab", true),
        ("ab", "ab%ab", false),
        ("aba", "ab%ba", false),
        ("xspecialyrequestsz", "x%special%requests%z", true),
        ("xspecialyrequests", "x%special%requests%z", false),
        ("aXbXc", "a%b%c", true),
        ("acb", "a%b%c", false),
    ] {
        assert_eq!(like(text, pattern), want, "{text:?} LIKE {pattern:?}");
        let m = LikeMatcher::new(pattern);
        assert_eq!(
            m.matches(text),
            want,
            "{text:?} LIKE {pattern:?} (read once)"
        );
    }
}

/// Groups held in the map move to a dense table over their keys' ranges: each group at the
/// slot its keys give (less each key's least value, times its stride), every other slot
/// empty, the maps emptied; a key outside the table leaves the groups in the map.
#[test]
fn groups_in_the_map_take_their_slots_in_a_dense_table() {
    use super::groups::Groups;
    let mut r = StdRng::seed_from_u64(5);
    // Two keys: a in -40..=-10 (31 values), b in 100..=106 (7 values); a's stride 1, b's 31.
    let (strides, offsets, slots) = (vec![1usize, 31], vec![-40i64, 100], 31 * 7);
    let mut g = Groups::new(2, 1);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..150 {
        let key = [r.gen_range(-40..=-10i64), r.gen_range(100..=106i64)];
        if seen.insert(key) {
            let id = g.push_group(&key);
            let packed = ((key[1] as u64 as u128) << 64) | key[0] as u64 as u128;
            g.packed.insert(packed, id);
        }
    }
    assert!(g.len > 50 && g.len < slots);
    let map_bytes = g.bytes();
    let table = g
        .slotted(&strides, &offsets, slots)
        .expect("every key in range");
    assert_eq!(table.len(), slots);
    assert!(g.packed.is_empty() && g.sparse.is_empty());
    for (at, &id) in table.iter().enumerate() {
        let key = [(at % 31) as i64 - 40, (at / 31) as i64 + 100];
        match seen.contains(&key) {
            true => {
                assert_ne!(id, u32::MAX, "{key:?}");
                assert_eq!([g.keys[0][id as usize], g.keys[1][id as usize]], key);
            }
            false => assert_eq!(id, u32::MAX, "{key:?}"),
        }
    }
    g.dense = Some((strides.clone(), table));
    // A group's bytes no longer count a map entry; the slots are counted instead.
    assert_eq!(g.bytes(), (g.len * (2 * 8 + 24) + slots * 4) as u64);
    assert!(map_bytes > g.len as u64 * 40);

    // One key past the table: nothing moves.
    let mut h = Groups::new(1, 1);
    for v in [3i64, 9, 12] {
        let id = h.push_group(&[v]);
        h.packed.insert(v as u64 as u128, id);
    }
    assert!(h.slotted(&[1], &[3], 9).is_none());
    assert_eq!(h.packed.len(), 3);
    assert!(h.slotted(&[1], &[3], 10).is_some());
}
