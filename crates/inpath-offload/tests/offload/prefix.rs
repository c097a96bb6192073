//! A string column's prefix as a register (`Op::Prefix`, SQL's `substring(s FROM 1 FOR n)`):
//! grouped by, on plain and dictionary-coded strings, it gives the reference's groups with
//! the prefixes as strings; sorted by, the strings' byte order; packed, two prefixes compare
//! as their strings. A prefix beyond 7 bytes is declined, and a graph asking for 0 or 8
//! characters is refused.

use crate::common::*;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use inpath_offload::graph::{
    pack_prefix, unpack_prefix, AggFunc, GroupKey, Op, Operator, Order, SortKey,
};
use inpath_offload::TaskGraph;
use inpath_table::Error;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;

/// Letters, digits, a NUL and two-byte letters: prefixes of up to 3 characters fit 7 bytes.
const ALPHABET: [&str; 9] = ["1", "3", "a", "b", "\0", "é", "ß", "Z", "-"];

fn text(r: &mut StdRng, max: usize) -> String {
    (0..r.gen_range(0..=max))
        .map(|_| ALPHABET[r.gen_range(0..ALPHABET.len())])
        .collect()
}

/// s: random strings of 0 to 6 characters; v: Int64; mode: 6 strings (stored as a
/// dictionary).
fn strings_table(n: usize, seed: u64) -> RecordBatch {
    let mut r = StdRng::seed_from_u64(seed);
    let modes: Vec<String> = (0..6).map(|_| text(&mut r, 5)).collect();
    let s: Vec<String> = (0..n).map(|_| text(&mut r, 6)).collect();
    let v: Vec<i64> = (0..n).map(|_| r.gen_range(-1000..1000)).collect();
    let mode: Vec<&str> = (0..n).map(|_| modes[r.gen_range(0..6)].as_str()).collect();
    let schema = Schema::new(vec![
        Field::new("s", DataType::Utf8, false),
        Field::new("v", DataType::Int64, false),
        Field::new("mode", DataType::Utf8, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(s)),
        Arc::new(Int64Array::from(v)),
        Arc::new(StringArray::from(mode)),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).unwrap()
}

/// Groups by the first `chars` characters of `column`: count(*) and sum(v).
fn prefix_graph(column: usize, chars: u32) -> TaskGraph {
    let mut t = task(
        "t",
        vec![Op::Prefix { column, chars }, Op::Load { column: 1 }],
        Operator::AggregateGroupBy {
            keys: vec![GroupKey::Register(0)],
            aggs: vec![agg(AggFunc::CountAll, None), agg(AggFunc::Sum, Some(1))],
        },
        vec![("k", "Utf8"), ("n", "Int64"), ("s", "Int64")],
    );
    t.order = Some(Order {
        keys: vec![SortKey {
            column: 0,
            descending: false,
            nulls_first: false,
        }],
        limit: None,
    });
    TaskGraph::single(t)
}

#[test]
fn prefix_groups_are_the_references_in_byte_order() {
    let batch = strings_table(20_000, 41);
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 3000);
    let s = strings(batch.column(0));
    let v = ints(batch.column(1));
    let mode = strings(batch.column(2));
    for (column, values) in [(0usize, &s), (2, &mode)] {
        for chars in 1..=3u32 {
            let mut want: HashMap<Vec<Cell>, Vec<Cell>> = HashMap::new();
            for (i, x) in values.iter().enumerate() {
                let key: String = x.as_ref().unwrap().chars().take(chars as usize).collect();
                let e = want
                    .entry(vec![Cell::Str(key)])
                    .or_insert(vec![Cell::Int(0), Cell::Int(0)]);
                e[0] = Cell::Int(e[0].int().unwrap() + 1);
                e[1] = Cell::Int(e[1].int().unwrap() + v[i].unwrap());
            }
            for lanes in [1, 3] {
                let device = device(&[("t", &reader)], lanes, 64 << 20);
                let got = rows(&run(&device, &prefix_graph(column, chars)).unwrap());
                // Sorted by the strings' bytes, as the host sorts them.
                let keys: Vec<&Cell> = got.iter().map(|r| &r[0]).collect();
                let bytes = |c: &Cell| match c {
                    Cell::Str(s) => s.as_bytes().to_vec(),
                    other => panic!("a key {other:?}"),
                };
                assert!(
                    keys.windows(2).all(|w| bytes(w[0]) <= bytes(w[1])),
                    "column {column}, {chars} characters, {lanes} lanes: {keys:?}"
                );
                let merged = merge_groups(&got, 1, &[AggFunc::CountAll, AggFunc::Sum]);
                assert_eq!(
                    merged, want,
                    "column {column}, {chars} characters, {lanes} lanes"
                );
            }
        }
    }
}

#[test]
fn packed_prefixes_compare_as_their_strings() {
    let mut r = StdRng::seed_from_u64(7);
    let words: Vec<String> = (0..400).map(|_| text(&mut r, 5)).collect();
    for chars in 1..=3u32 {
        let prefix = |w: &str| -> String { w.chars().take(chars as usize).collect() };
        for a in &words {
            let pa = pack_prefix(a, chars).unwrap();
            assert_eq!(unpack_prefix(pa).as_deref(), Some(prefix(a).as_str()));
            for b in words.iter().take(60) {
                let pb = pack_prefix(b, chars).unwrap();
                let strings = prefix(a).as_bytes().cmp(prefix(b).as_bytes());
                assert_eq!(pa.cmp(&pb), strings, "{a:?} {b:?} at {chars}");
            }
        }
    }
    // Known answers: the bytes from the top, the count in the lowest byte, the top bit flipped.
    assert_eq!(
        pack_prefix("13-555", 2),
        Some(0xB133_0000_0000_0002_u64 as i64)
    );
    assert_eq!(pack_prefix("", 2), Some(i64::MIN));
    assert_eq!(
        pack_prefix("abcdefgh", 7).map(unpack_prefix),
        Some(Some("abcdefg".into()))
    );
    assert_eq!(pack_prefix("éééé", 4), None);
    assert_eq!(unpack_prefix(0x0000_0000_0000_0009), None);
}

#[test]
fn a_prefix_beyond_seven_bytes_is_declined_and_bad_lengths_refused() {
    let batch = strings_table(500, 3);
    let dir = tempfile::tempdir().unwrap();
    let reader = write_table(dir.path(), "t", &batch, 200);
    let device = device(&[("t", &reader)], 2, 64 << 20);
    // Six characters of up to two bytes each: the strings with three or more two-byte
    // letters among their first six pass 7 bytes.
    match run(&device, &prefix_graph(0, 6)) {
        Err(Error::DeviceDeclined { detail, .. }) => {
            assert!(detail.contains("7 bytes"), "{detail}")
        }
        other => panic!("declined, not {other:?}"),
    }
    for chars in [0, 8] {
        let e = prefix_graph(0, chars)
            .check()
            .expect_err("refused")
            .to_string();
        assert!(e.contains("1 to 7"), "{e}");
        assert!(run(&device, &prefix_graph(0, chars)).is_err());
    }
    // A prefix of an integer column is an error, not a guess.
    let e = run(&device, &prefix_graph(1, 2)).expect_err("an integer column");
    assert!(e.to_string().contains("strings only"), "{e}");
    assert!(idle(&device));
}
