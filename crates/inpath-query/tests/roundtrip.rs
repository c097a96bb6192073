//! Round trips: every type, null pattern, page size and seal tier; chunking never matters.

mod common;
use arrow_array::RecordBatch;
use common::*;
use inpath_query::format::Encoding;
use inpath_query::{TableReader, TableWriter, WriteOptions};

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
    let limit = inpath_query::format::DICTIONARY_LIMIT;
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
