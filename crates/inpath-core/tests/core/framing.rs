//! Record framing: every chunking gives the same records; bad input gives the exact error.

use inpath_core::{ColumnRef, CsvSpec, Deframer, Error, Framing, RecordSink, Result};
use rand::{Rng, SeedableRng};

/// Records everything a deframer hands over.
#[derive(Default, Debug, PartialEq)]
struct Collect {
    fixed: Vec<u8>,
    values: Vec<(usize, Vec<u8>)>,
    rows: usize,
}

impl RecordSink for Collect {
    fn fixed(&mut self, records: &[u8]) -> Result<()> {
        self.fixed.extend_from_slice(records);
        Ok(())
    }
    fn value(&mut self, column: usize, value: &[u8]) -> Result<()> {
        self.values.push((column, value.to_vec()));
        Ok(())
    }
    fn end_row(&mut self) -> Result<()> {
        self.rows += 1;
        Ok(())
    }
}

fn run(framing: &Framing, input: &[u8], cuts: &[usize]) -> Result<Collect> {
    let mut deframer = Deframer::new(framing.clone())?;
    let mut sink = Collect::default();
    let mut start = 0;
    for &cut in cuts {
        deframer.feed(&input[start..cut], &mut sink)?;
        start = cut;
    }
    deframer.feed(&input[start..], &mut sink)?;
    deframer.close(&mut sink)?;
    Ok(sink)
}

fn random_cuts(rng: &mut impl Rng, len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = (0..rng.gen_range(0..20))
        .map(|_| rng.gen_range(0..=len))
        .collect();
    cuts.sort();
    cuts
}

fn every_byte(len: usize) -> Vec<usize> {
    (1..len).collect()
}

#[test]
fn fixed_width_any_chunking_gives_the_same_records() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let input: Vec<u8> = (0..4000).map(|_| rng.gen()).collect();
    for width in [1, 3, 4, 8] {
        let framing = Framing::Fixed { width };
        let whole = &input[..input.len() - input.len() % width];
        let one_shot = run(&framing, whole, &[]).unwrap();
        assert_eq!(one_shot.fixed, whole);
        assert_eq!(
            run(&framing, whole, &every_byte(whole.len())).unwrap(),
            one_shot
        );
        for _ in 0..50 {
            let cuts = random_cuts(&mut rng, whole.len());
            assert_eq!(run(&framing, whole, &cuts).unwrap(), one_shot);
        }
    }
}

#[test]
fn fixed_width_trailing_bytes_are_an_error_with_counts() {
    let input = [1u8; 10];
    let err = run(&Framing::Fixed { width: 4 }, &input, &[3, 7]).unwrap_err();
    match err {
        Error::TrailingBytes {
            trailing,
            width,
            complete,
        } => {
            assert_eq!((trailing, width, complete), (2, 4, 2));
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(Deframer::new(Framing::Fixed { width: 0 }).is_err());
}

#[test]
fn lines_any_chunking_and_final_line_without_newline() {
    let input = b"alpha\nbeta\r\n\ngamma";
    let expected: Vec<(usize, Vec<u8>)> = ["alpha", "beta", "", "gamma"]
        .iter()
        .map(|s| (0, s.as_bytes().to_vec()))
        .collect();
    let one_shot = run(&Framing::Lines, input, &[]).unwrap();
    assert_eq!(one_shot.values, expected);
    assert_eq!(one_shot.rows, 4);
    assert_eq!(
        run(&Framing::Lines, input, &every_byte(input.len())).unwrap(),
        one_shot
    );
    // A file ending in a newline has no empty last record.
    assert_eq!(
        run(&Framing::Lines, b"a\nb\n", &[]).unwrap().values.len(),
        2
    );
}

fn csv(columns: Vec<ColumnRef>, has_header: bool) -> Framing {
    Framing::Csv(CsvSpec {
        columns,
        delimiter: b',',
        has_header,
    })
}

#[test]
fn csv_column_by_name_and_index_with_quotes_across_chunks() {
    let input = b"id,name,score\n1,\"Smith, J\",10\n2,\"multi\nline\",20\n3,\"say \"\"hi\"\"\",30";
    let by_name = csv(vec![ColumnRef::Name("name".into())], true);
    let one_shot = run(&by_name, input, &[]).unwrap();
    let names: Vec<&[u8]> = one_shot.values.iter().map(|(_, v)| v.as_slice()).collect();
    assert_eq!(names, [&b"Smith, J"[..], b"multi\nline", b"say \"hi\""]);
    assert_eq!(
        run(&by_name, input, &every_byte(input.len())).unwrap(),
        one_shot
    );
    let by_index = csv(vec![ColumnRef::Index(1)], true);
    assert_eq!(run(&by_index, input, &[]).unwrap(), one_shot);
    // Several columns: values come in file order, tagged with their place in the selection.
    let two = csv(
        vec![ColumnRef::Name("score".into()), ColumnRef::Index(0)],
        true,
    );
    let got = run(&two, input, &[5, 17]).unwrap();
    assert_eq!(got.values[0], (1, b"1".to_vec()));
    assert_eq!(got.values[1], (0, b"10".to_vec()));
    assert_eq!(got.rows, 3);
}

#[test]
fn csv_all_columns_and_headerless() {
    let input = b"1,2,3\n4,5,6\n";
    let all = run(&csv(vec![], false), input, &[4]).unwrap();
    assert_eq!(all.values.len(), 6);
    assert_eq!(all.values[5], (2, b"6".to_vec()));
    let mut deframer = Deframer::new(csv(vec![], true)).unwrap();
    let mut sink = Collect::default();
    deframer.feed(b"x,y\n1,2\n", &mut sink).unwrap();
    assert_eq!(deframer.selected_names().unwrap(), ["x", "y"]);
}

#[test]
fn csv_errors_name_the_problem() {
    let missing = run(
        &csv(vec![ColumnRef::Name("nope".into())], true),
        b"a,b\n1,2\n",
        &[],
    );
    match missing.unwrap_err() {
        Error::MissingColumn { column, available } => {
            assert_eq!(column, "\"nope\"");
            assert!(
                available.contains("#0 a") && available.contains("#1 b"),
                "{available}"
            );
        }
        other => panic!("unexpected error {other}"),
    }
    let out_of_range = run(&csv(vec![ColumnRef::Index(5)], true), b"a,b\n1,2\n", &[]);
    assert!(matches!(
        out_of_range.unwrap_err(),
        Error::MissingColumn { .. }
    ));
    let ragged = run(
        &csv(vec![ColumnRef::Index(2)], true),
        b"a,b,c\n1,2,3\n4,5\n",
        &[],
    );
    match ragged.unwrap_err() {
        Error::RaggedRow {
            row,
            fields,
            needed,
        } => assert_eq!((row, fields, needed), (3, 2, 3)),
        other => panic!("unexpected error {other}"),
    }
    let ragged_all = run(&csv(vec![], true), b"a,b\n1,2\n3,4,5\n", &[]);
    assert!(matches!(
        ragged_all.unwrap_err(),
        Error::RaggedRow { row: 3, .. }
    ));
    let named_without_header = Deframer::new(csv(vec![ColumnRef::Name("a".into())], false));
    assert!(matches!(
        named_without_header.unwrap_err(),
        Error::MissingColumn { .. }
    ));
}

#[test]
fn split_points_fall_on_record_boundaries() {
    assert_eq!(Framing::Fixed { width: 4 }.split_point(&[0; 10]), Some(8));
    assert_eq!(Framing::Lines.split_point(b"ab\ncd\nef"), Some(6));
    assert_eq!(Framing::Lines.split_point(b"abc"), Some(0));
    assert_eq!(csv(vec![], true).split_point(b"a\n"), None);
}
