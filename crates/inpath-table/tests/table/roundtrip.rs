//! Round trips: every type, null pattern, page size and seal tier; chunking never matters.

use crate::common::*;
use arrow_array::RecordBatch;
use inpath_table::format::Encoding;
use inpath_table::{TableReader, TableWriter, WriteOptions};

fn round_trip(batch: &RecordBatch, r: usize, chunk: usize, tier: usize) {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    let (_, seal) = tiers()[tier];
    write(&table, batch, chunk, options(r, seal));
    assert_eq!(
        read_all(&table, &ring()),
        batch_values(batch),
        "r={r} chunk={chunk} tier={tier}"
    );
    let reader = TableReader::open(&table, &ring()).unwrap();
    assert_eq!(reader.row_count(), batch.num_rows() as u64);
    assert_eq!(reader.page_count(), batch.num_rows().div_ceil(r));
    assert_eq!(reader.schema().fields().len(), batch.num_columns());
    for (f, g) in reader.schema().fields().iter().zip(batch.schema().fields()) {
        assert_eq!(f.name(), g.name());
        assert_eq!(f.data_type(), g.data_type());
        assert_eq!(f.is_nullable(), g.is_nullable());
    }
}

#[test]
fn every_type_every_null_pattern() {
    for (k, nulls) in [
        Nulls::None,
        Nulls::All,
        Nulls::Alternating,
        Nulls::Random(7),
    ]
    .into_iter()
    .enumerate()
    {
        let batch = every_type(3000, nulls, k as u64);
        // R not dividing the row count (a partial last page), batches not aligned to pages.
        round_trip(&batch, 1024, 700, 0);
    }
}

#[test]
fn every_tier() {
    let batch = every_type(2500, Nulls::Random(1), 11);
    for tier in 0..tiers().len() {
        round_trip(&batch, 1000, 2500, tier);
    }
}

#[test]
fn one_row_pages_and_odd_sizes() {
    let batch = every_type(37, Nulls::Alternating, 3);
    round_trip(&batch, 1, 5, 0);
    round_trip(&batch, 1, 5, 4);
    round_trip(&batch, 36, 1, 3);
    round_trip(&batch, 37, 37, 1);
    round_trip(&batch, 100, 10, 2);
}

#[test]
fn empty_table() {
    let batch = every_type(0, Nulls::None, 0);
    for tier in [0, 4] {
        round_trip(&batch, 64, 1, tier);
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("empty");
        let w = TableWriter::create(&table, batch.schema(), options(64, tiers()[tier].1)).unwrap();
        let s = w.finish().unwrap();
        assert_eq!((s.rows, s.pages), (0, 0));
        let reader = TableReader::open(&table, &ring()).unwrap();
        assert_eq!(reader.row_count(), 0);
        assert_eq!(reader.scan(&[0, 1], &[]).unwrap().count(), 0);
    }
}

#[test]
fn any_chunking_is_byte_identical() {
    let batch = every_type(5000, Nulls::Random(5), 21);
    for (_, seal) in tiers() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one").join("t");
        write(&one, &batch, usize::MAX, options(512, seal));
        for chunk in [1, 7, 511, 512, 513, 4999] {
            let t = dir.path().join(format!("c{chunk}")).join("t");
            write(&t, &batch, chunk, options(512, seal));
            assert_same_files(&t, &one, &format!("chunk {chunk}"));
        }
        // Threads encode the columns of a page side by side: still the same bytes.
        let t = dir.path().join("threads").join("t");
        let mut o = options(4096, seal);
        let single = dir.path().join("single").join("t");
        write(&single, &batch, 999, o.clone());
        o.threads = 3;
        write(&t, &batch, 999, o);
        assert_same_files(&t, &single, "threads");
    }
}

#[test]
fn scan_projects_and_reads_only_listed_pages() {
    let batch = every_type(1000, Nulls::None, 2);
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    write(&table, &batch, 1000, options(100, tiers()[4].1));
    let reader = TableReader::open(&table, &ring()).unwrap();
    let batches: Vec<RecordBatch> = reader
        .scan(&[6, 0], &[3, 9])
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].schema().field(0).name(), "low");
    assert_eq!(
        batch_values(&batches[1]),
        batch_values(&batch.slice(900, 100).project(&[6, 0]).unwrap())
    );
    // Damage page 5 of every column: pages 3 and 9 still read, page 5 fails.
    for (c, _) in batch.schema().fields().iter().enumerate() {
        let m = &reader.manifest().columns[c].pages[5];
        let path = table.join(format!("{c}.col"));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(m.offset + m.len - 1) as usize] ^= 1;
        std::fs::write(&path, bytes).unwrap();
    }
    let reader = TableReader::open(&table, &ring()).unwrap();
    assert_eq!(
        reader
            .scan(&[0, 6], &[3, 9])
            .unwrap()
            .filter(|b| b.is_ok())
            .count(),
        2
    );
    assert!(reader.scan(&[0], &[5]).unwrap().next().unwrap().is_err());
    assert!(reader.scan(&[99], &[0]).is_err());
    assert!(reader.scan(&[0], &[10]).is_err());
}

#[test]
fn encodings_are_narrow() {
    let batch = every_type(5000, Nulls::None, 4);
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    write(&table, &batch, 4096, options(5000, tiers()[0].1));
    let reader = TableReader::open(&table, &ring()).unwrap();
    let page = |c: usize| reader.zone_map(c, 0).unwrap().clone();
    assert_eq!(page(0).width, 32); // i32 from MIN to MAX
    assert_eq!(page(2).encoding, Encoding::For);
    assert_eq!(page(2).width, 12); // 2500 distinct days
    assert_eq!(page(6).encoding, Encoding::Dictionary);
    assert_eq!(page(6).width, 4); // 9 words
    assert_eq!(page(7).encoding, Encoding::Heap);
    assert_eq!(page(8).encoding, Encoding::Bitmap);
    assert!(
        reader.manifest().columns[6]
            .dictionary
            .as_ref()
            .unwrap()
            .len()
            == 9
    );
}

#[test]
fn dictionary_closes_past_the_limit() {
    use arrow_array::{ArrayRef, StringArray};
    use std::sync::Arc;
    let limit = inpath_table::format::DICTIONARY_LIMIT;
    // Page 0: 3000 distinct, page 1: 2000 more (over the limit), page 2: old values again.
    let vals: Vec<String> = (0..3000)
        .chain(3000..5000)
        .chain(0..100)
        .map(|i| format!("v{i}"))
        .collect();
    let col: ArrayRef = Arc::new(StringArray::from_iter_values(vals.iter()));
    let batch = RecordBatch::try_from_iter([("s", col)]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    let mut o = options(3000, tiers()[1].1);
    o.rows_per_page = 3000;
    write(&table, &batch, 1000, o);
    let reader = TableReader::open(&table, &ring()).unwrap();
    let enc: Vec<Encoding> = (0..2)
        .map(|p| reader.zone_map(0, p).unwrap().encoding)
        .collect();
    assert_eq!(enc, vec![Encoding::Dictionary, Encoding::Heap]);
    assert!(
        reader.manifest().columns[0]
            .dictionary
            .as_ref()
            .unwrap()
            .len()
            <= limit
    );
    assert_eq!(read_all(&table, &ring()), batch_values(&batch));
    let _ = WriteOptions::default();
}

/// The reference: what a FOR block must decode to, computed without the packer.
fn reference_for(values: &[i128]) {
    use inpath_table::testing::{encode_for, parse_for, width_for};
    let mut out = Vec::new();
    let width = encode_for(values, None, &mut out);
    let (min, max) = (
        values.iter().min().copied().unwrap_or(0),
        values.iter().max().copied().unwrap_or(0),
    );
    assert_eq!(width, width_for(max.wrapping_sub(min) as u128));
    let (block, used) = parse_for(&out, values.len()).unwrap();
    assert_eq!(used, out.len());
    assert_eq!(block.reference, min);
    assert_eq!(block.to_i128(), values, "width {width}");
    if width <= 64 && i64::try_from(min).is_ok() && i64::try_from(max).is_ok() {
        let as64: Vec<i64> = values.iter().map(|&v| v as i64).collect();
        assert_eq!(block.to_i64(), as64);
    }
    // Packed size is exactly the layout's: ⌈n/128⌉ blocks of 16·w bytes up to 32 bits.
    let n = values.len();
    let expected = match width {
        0 => 0,
        1..=32 => n.div_ceil(128) * 16 * width as usize,
        64 => n * 8,
        _ => n * 16,
    };
    assert_eq!(out.len(), 24 + expected);
}

#[test]
fn bit_packing_matches_the_plain_reference() {
    use rand::{Rng, SeedableRng};
    let mut r = rand::rngs::StdRng::seed_from_u64(99);
    let cases: Vec<Vec<i128>> = vec![
        vec![],
        vec![5],
        vec![7; 1000],
        vec![-3; 129],
        vec![i32::MIN as i128, i32::MAX as i128],
        vec![i64::MIN as i128, i64::MAX as i128, 0],
        vec![i128::MIN, i128::MAX],
        (0..300).map(|i| -(i as i128)).collect(),
        (0..1000)
            .map(|_| r.gen_range(-1_000_000..1_000_000))
            .collect(),
        (0..257).map(|_| r.gen::<i64>() as i128).collect(),
        (0..130).map(|_| r.gen::<i128>()).collect(),
    ];
    for case in &cases {
        reference_for(case);
    }
    // Every width from 0 to 33 at a length that is not a multiple of 128.
    for bits in 0..=33u32 {
        let max: i128 = (1i128 << bits) - 1;
        let vals: Vec<i128> = (0..300).map(|i| if i % 5 == 0 { max } else { r.gen_range(0..=max) } - 17).collect();
        reference_for(&vals);
    }
}

#[test]
fn pruning_never_drops_a_matching_page() {
    use inpath_table::Scalar;
    use rand::{Rng, SeedableRng};
    for seed in 0..6u64 {
        let batch = every_type(2000, Nulls::Random(seed), seed);
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t");
        write(&table, &batch, 2000, options(97, tiers()[0].1));
        let reader = TableReader::open(&table, &ring()).unwrap();
        let mut r = rand::rngs::StdRng::seed_from_u64(seed + 100);
        let all = read_all(&table, &ring());
        for _ in 0..40 {
            for c in [0usize, 1, 2, 3, 5, 6, 7, 8] {
                let col = &all[c];
                // Bounds drawn from the column's own values (and beyond them), either side open.
                let pick = |r: &mut rand::rngs::StdRng| col[r.gen_range(0..col.len())].clone();
                let (a, b) = (pick(&mut r), pick(&mut r));
                let parse = |v: Option<String>| -> Option<Scalar> {
                    let v = v?;
                    Some(match c {
                        5 => Scalar::F64(v.parse().unwrap()),
                        6 | 7 => Scalar::Str(v),
                        8 => Scalar::Bool(v == "true"),
                        _ => Scalar::Int(v.parse().unwrap()),
                    })
                };
                let (mut lo, mut hi) = (parse(a), parse(b));
                if let (Some(x), Some(y)) = (&lo, &hi) {
                    if x.partial_cmp_to(y) == Some(std::cmp::Ordering::Greater) {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                }
                let kept = reader.prune(c, lo.as_ref(), hi.as_ref()).unwrap();
                for (k, chunk) in col.chunks(97).enumerate() {
                    let matches = chunk.iter().flatten().any(|v| {
                        let v = parse(Some(v.clone())).unwrap();
                        let ge = lo.as_ref().is_none_or(|lo| {
                            matches!(
                                v.partial_cmp_to(lo),
                                Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
                            )
                        });
                        let le = hi.as_ref().is_none_or(|hi| {
                            matches!(
                                v.partial_cmp_to(hi),
                                Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
                            )
                        });
                        ge && le
                    });
                    if matches {
                        assert!(
                            kept.contains(&k),
                            "seed {seed} column {c} page {k} {lo:?}..{hi:?}"
                        );
                    }
                }
            }
        }
        // A range beyond every value prunes every page; an all-null column prunes everything.
        assert!(reader
            .prune(2, Some(&Scalar::Int(1_000_000)), None)
            .unwrap()
            .is_empty());
        assert!(reader
            .prune(2, Some(&Scalar::Str("x".into())), None)
            .is_err());
    }
    let batch = every_type(300, Nulls::All, 1);
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t");
    write(&table, &batch, 300, options(100, tiers()[0].1));
    let reader = TableReader::open(&table, &ring()).unwrap();
    assert!(reader.prune(0, None, None).unwrap().is_empty());
}
