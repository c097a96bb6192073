//! Named malformed inputs, each asserting the exact error.

use inpath_core::{ColumnRef, CsvSpec, Engine, Error};
use inpath_corr::{Corr, CorrConfig, DType, NanPolicy, Statistics};

fn csv(text: &str, dtype: DType) -> Result<Statistics, Error> {
    let mut corr = Corr::new(CorrConfig::csv(dtype, CsvSpec::default()))?;
    corr.update(text.as_bytes())?;
    corr.finish()
}

#[test]
fn fewer_than_two_streams_is_a_parameter_error() {
    for m in [0, 1] {
        let err = Corr::new(CorrConfig::rows(DType::U32, m))
            .err()
            .expect("M < 2 refused");
        assert!(
            matches!(&err, Error::Parameter { name, .. } if name == "streams"),
            "{err}"
        );
        assert!(err.to_string().contains("2 to 8192"), "{err}");
    }
    let err = Corr::new(CorrConfig::rows(DType::U8, 100_000))
        .err()
        .expect("too many refused");
    assert!(matches!(err, Error::Parameter { .. }));
    // A one-column CSV.
    let err = csv("a\n1\n2\n", DType::F64).unwrap_err();
    assert!(
        matches!(&err, Error::Parameter { name, value, .. } if name == "streams" && value == "1"),
        "{err}"
    );
    // Selecting one column.
    let spec = CsvSpec {
        columns: vec![ColumnRef::Name("a".into())],
        ..CsvSpec::default()
    };
    assert!(matches!(
        Corr::new(CorrConfig::csv(DType::F64, spec)),
        Err(Error::Parameter { .. })
    ));
}

#[test]
fn a_length_that_is_not_whole_rows_is_trailing_bytes() {
    let mut corr = Corr::new(CorrConfig::rows(DType::U32, 3)).unwrap();
    corr.update(&[0u8; 12 * 5 + 7]).unwrap();
    let err = corr.finish().unwrap_err();
    assert!(
        matches!(
            err,
            Error::TrailingBytes {
                trailing: 7,
                width: 12,
                complete: 5
            }
        ),
        "{err}"
    );
    // The engine is reset and usable again.
    corr.update(&[0u8; 24]).unwrap();
    assert_eq!(corr.finish().unwrap().count(), 2);
}

#[test]
fn ragged_csv_rows_are_refused() {
    let err = csv("a,b,c\n1,2,3\n4,5\n", DType::I32).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RaggedRow {
                row: 3,
                fields: 2,
                needed: 3
            }
        ),
        "{err}"
    );
    let err = csv("a,b\n1,2\n4,5,6\n", DType::I32).unwrap_err();
    assert!(matches!(err, Error::RaggedRow { row: 3, .. }), "{err}");
}

#[test]
fn non_numeric_csv_cells_name_row_column_and_value() {
    let err = csv("x,y\n1,2\n3,abc\n", DType::F64).unwrap_err();
    match &err {
        Error::BadValue {
            location, value, ..
        } => {
            assert_eq!(location, "row 3, column \"y\"");
            assert_eq!(value, "abc");
        }
        other => panic!("{other}"),
    }
    let err = csv("x,y\n1,2\n3,\n", DType::F64).unwrap_err();
    assert!(
        err.to_string().contains("empty cells are not supported"),
        "{err}"
    );
    let err = csv("x,y\n1,300\n", DType::U8).unwrap_err();
    assert!(
        err.to_string().contains("in the u8 range 0 to 255"),
        "{err}"
    );
    let err = csv("x,y\n1,2.5\n", DType::I16).unwrap_err();
    assert!(err.to_string().contains("an integer (i16"), "{err}");
}

#[test]
fn csv_statistics_use_the_header_names() {
    let stats = csv("temp, load ,x\n1,2,3\n2,4,1\n3,6.5,2\n", DType::F64).unwrap();
    assert_eq!(stats.names(), ["temp", " load ", "x"]);
    assert_eq!(stats.count(), 3);
    let r = stats.pearson(NanPolicy::Nan);
    assert!(r[0] > 0.99 && r[0] < 1.0);
}

#[test]
fn mismatched_statistics_do_not_merge() {
    let a = {
        let mut c = Corr::new(CorrConfig::rows(DType::U8, 2)).unwrap();
        c.update(&[1, 2]).unwrap();
        c.finish().unwrap()
    };
    let other_type = {
        let mut c = Corr::new(CorrConfig::rows(DType::U16, 2)).unwrap();
        c.update(&[1, 0, 2, 0]).unwrap();
        c.finish().unwrap()
    };
    let other_m = {
        let mut c = Corr::new(CorrConfig::rows(DType::U8, 3)).unwrap();
        c.update(&[1, 2, 3]).unwrap();
        c.finish().unwrap()
    };
    let mut renamed = a.clone();
    renamed.set_names(vec!["p".into(), "q".into()]).unwrap();
    for (other, needle) in [
        (&other_type, "item types differ: u8 and u16"),
        (&other_m, "stream counts differ: 2 and 3"),
        (&renamed, "stream 0 is named \"0\" in one and \"p\""),
    ] {
        let mut x = a.clone();
        let err = x.merge(other).unwrap_err();
        assert!(matches!(err, Error::Incompatible(_)), "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert_eq!(x, a, "a failed merge leaves the statistics unchanged");
    }
}

#[test]
fn empty_csv_is_a_clear_error() {
    let err = csv("", DType::F64).unwrap_err();
    assert!(err.to_string().contains("no rows"), "{err}");
}
