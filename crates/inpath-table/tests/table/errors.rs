//! Bad input: every case gives its typed error, naming the table (and column and page), never
//! a panic or a wrong answer.

use crate::common::*;
use arrow_array::{ArrayRef, Int64Array, ListArray, RecordBatch};
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
use inpath_table::{Error, TableReader, TableWriter, WriteOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn table(tier: usize) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("orders");
    write(
        &t,
        &every_type(500, Nulls::Random(2), 8),
        500,
        options(100, tiers()[tier].1),
    );
    (dir, t)
}

fn open_err(t: &Path, keys: &KeyRing) -> Error {
    TableReader::open(t, keys).expect_err("the table must not open")
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn missing_manifest() {
    let (_d, t) = table(0);
    std::fs::remove_file(t.join("manifest")).unwrap();
    let e = open_err(&t, &ring());
    assert!(matches!(e, Error::ManifestMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("table orders"), "{e}");
}

#[test]
fn damaged_manifest() {
    let (_d, t) = table(0);
    edit(&t.join("manifest"), |b| {
        let n = b.len();
        b[n - 10] ^= 0x20;
    });
    let e = open_err(&t, &ring());
    assert!(
        matches!(
            e,
            Error::ManifestSeal {
                source: inpath_seal::Error::PayloadChecksum { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("table orders"), "{e}");
}

#[test]
fn truncated_manifest() {
    let (_d, t) = table(1);
    edit(&t.join("manifest"), |b| b.truncate(b.len() - 1));
    let e = open_err(&t, &ring());
    assert!(matches!(e, Error::ManifestDamaged { .. }), "{e:?}");
    assert!(e.to_string().contains("table orders"), "{e}");
    edit(&t.join("manifest"), |b| b.truncate(10));
    assert!(matches!(
        open_err(&t, &ring()),
        Error::ManifestDamaged { .. }
    ));
}

#[test]
fn bad_magic_and_version() {
    let (_d, t) = table(0);
    edit(&t.join("manifest"), |b| b[0] = b'X');
    let e = open_err(&t, &ring());
    assert!(matches!(e, Error::BadMagic { .. }), "{e:?}");
    assert!(e.to_string().contains("table orders"), "{e}");
    edit(&t.join("manifest"), |b| {
        b[0] = b'I';
        b[8] = 9;
    });
    let e = open_err(&t, &ring());
    assert!(
        matches!(e, Error::UnsupportedVersion { version: 9, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("table orders"), "{e}");
}

#[test]
fn damaged_page_names_table_column_page() {
    for tier in [0, 1, 3, 4] {
        let (_d, t) = table(tier);
        let reader = TableReader::open(&t, &ring()).unwrap();
        let m = reader.zone_map(7, 2).unwrap().clone();
        edit(&t.join("7.col"), |b| {
            b[(m.offset + m.len - 3) as usize] ^= 0x01
        });
        let reader = TableReader::open(&t, &ring()).unwrap();
        let e = reader.read_page(7, 2).expect_err("damaged page");
        match &e {
            Error::PageSeal {
                table,
                column,
                page,
                source,
            } => {
                assert_eq!(
                    (table.as_str(), column.as_str(), *page),
                    ("orders", "high", 2)
                );
                assert!(
                    matches!(
                        source.as_ref(),
                        inpath_seal::Error::PayloadChecksum { .. }
                            | inpath_seal::Error::AuthenticationFailed { .. }
                    ),
                    "{source:?}"
                );
            }
            other => panic!("tier {tier}: {other:?}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("orders") && text.contains("high") && text.contains("page 2"),
            "{text}"
        );
        // Other pages still read.
        assert!(reader.read_page(7, 1).is_ok());
        assert!(reader.read_page(0, 2).is_ok());
    }
}

#[test]
fn damaged_page_header() {
    let (_d, t) = table(0);
    let reader = TableReader::open(&t, &ring()).unwrap();
    let m = reader.zone_map(1, 0).unwrap().clone();
    edit(&t.join("1.col"), |b| b[m.offset as usize + 20] ^= 0x01);
    let e = TableReader::open(&t, &ring())
        .unwrap()
        .read_page(1, 0)
        .unwrap_err();
    assert!(
        matches!(
            &e,
            Error::PageSeal { page: 0, source, .. }
                if matches!(**source, inpath_seal::Error::HeaderChecksum { .. })
        ),
        "{e:?}"
    );
}

#[test]
fn column_file_of_the_wrong_length() {
    let (_d, t) = table(4);
    edit(&t.join("3.col"), |b| b.truncate(b.len() - 5));
    let e = open_err(&t, &ring());
    match &e {
        Error::ColumnFileLength {
            table,
            column,
            expected,
            found,
            ..
        } => {
            assert_eq!((table.as_str(), column.as_str()), ("orders", "dec"));
            assert_eq!(*expected, found + 5);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("column dec"), "{e}");
    let (_d, t) = table(0);
    edit(&t.join("0.col"), |b| b.push(0));
    assert!(matches!(
        open_err(&t, &ring()),
        Error::ColumnFileLength { .. }
    ));
    let (_d, t) = table(0);
    std::fs::remove_file(t.join("2.col")).unwrap();
    assert!(matches!(open_err(&t, &ring()), Error::Io { .. }));
}

#[test]
fn wrong_or_missing_key() {
    let other = {
        let mut r = KeyRing::new();
        r.insert(3, Key::new(&[0x11; 32]).unwrap());
        r
    };
    // GCM: authentication fails; CTR: the page CRC shows the wrong key.
    let (_d, t) = table(4);
    let e = open_err(&t, &other);
    assert!(
        matches!(
            e,
            Error::ManifestSeal {
                source: inpath_seal::Error::AuthenticationFailed { .. },
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("table orders"), "{e}");
    let (_d, t) = table(3);
    let e = open_err(&t, &other);
    assert!(
        matches!(
            e,
            Error::ManifestSeal {
                source: inpath_seal::Error::WrongKey { .. },
                ..
            }
        ),
        "{e:?}"
    );
    let e = open_err(&t, &KeyRing::new());
    assert!(
        matches!(
            e,
            Error::ManifestSeal {
                source: inpath_seal::Error::UnknownKeyId { id: 3, .. },
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn page_sealed_with_another_key() {
    // Two tables of the same rows under different keys with the same id: their column files
    // have the same length, so one can stand in for the other under the first's manifest.
    let batch = every_type(300, Nulls::None, 5);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("a").join("t"),
        dir.path().join("b").join("t"),
    );
    write(&a, &batch, 300, options(100, tiers()[4].1));
    let mut o = options(100, tiers()[4].1);
    o.key = Some((3, Key::new(&[0x77; 32]).unwrap()));
    write(&b, &batch, 300, o);
    std::fs::copy(b.join("1.col"), a.join("1.col")).unwrap();
    let reader = TableReader::open(&a, &ring()).unwrap();
    let e = reader.read_page(1, 1).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::PageSeal { column, page: 1, source, .. }
                if column == "i64" && matches!(**source, inpath_seal::Error::AuthenticationFailed { .. })
        ),
        "{e:?}"
    );
    assert!(reader.read_page(0, 1).is_ok());
}

#[test]
fn unsupported_type_and_schema_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let list: ArrayRef = Arc::new(ListArray::from_iter_primitive::<
        arrow_array::types::Int32Type,
        _,
        _,
    >(vec![Some(vec![Some(1)])]));
    let batch = RecordBatch::try_from_iter([("tags", list)]).unwrap();
    let e = TableWriter::create(
        &dir.path().join("t"),
        batch.schema(),
        WriteOptions::default(),
    )
    .err()
    .unwrap();
    assert!(
        matches!(&e, Error::UnsupportedType { table, column, .. } if table == "t" && column == "tags"),
        "{e:?}"
    );
    assert!(!dir.path().join("t").exists());

    let batch = every_type(10, Nulls::None, 1);
    let mut w = TableWriter::create(
        &dir.path().join("t"),
        batch.schema(),
        WriteOptions::default(),
    )
    .unwrap();
    let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, 2]));
    let wrong = RecordBatch::try_from_iter([("x", ints)]).unwrap();
    assert!(matches!(w.write(&wrong), Err(Error::SchemaMismatch { .. })));
    drop(w);
    // A writer dropped before finish leaves nothing behind, not even its staging directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn cipher_without_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let batch = every_type(10, Nulls::None, 1);
    let o = WriteOptions {
        seal: SealConfig {
            compression: Compression::None,
            cipher: Cipher::Gcm,
        },
        ..WriteOptions::default()
    };
    let e = TableWriter::create(&dir.path().join("t"), batch.schema(), o)
        .err()
        .unwrap();
    assert!(matches!(e, Error::Seal { .. }), "{e:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn existing_directories() {
    let (d, t) = table(0);
    let batch = every_type(50, Nulls::None, 1);
    let e = TableWriter::create(&t, batch.schema(), WriteOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, Error::OutputExists { .. }), "{e:?}");
    // Overwriting a table replaces it whole.
    let o = WriteOptions {
        overwrite: true,
        ..WriteOptions::default()
    };
    write(&t, &batch, 50, o.clone());
    assert_eq!(TableReader::open(&t, &ring()).unwrap().row_count(), 50);
    // A directory that is not a table is never replaced, even with overwrite.
    let other = d.path().join("home");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"keep me").unwrap();
    let e = TableWriter::create(&other, batch.schema(), o)
        .err()
        .unwrap();
    assert!(matches!(e, Error::OutputExists { .. }), "{e:?}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"keep me");
    // An empty directory is fine.
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    write(&empty, &batch, 50, WriteOptions::default());
    assert_eq!(TableReader::open(&empty, &ring()).unwrap().row_count(), 50);
}

#[test]
fn bad_arguments() {
    let (_d, t) = table(0);
    let r = TableReader::open(&t, &ring()).unwrap();
    assert!(matches!(r.read_page(99, 0), Err(Error::Parameter { .. })));
    assert!(matches!(r.read_page(0, 5), Err(Error::Parameter { .. })));
    let batch = every_type(1, Nulls::None, 1);
    let o = WriteOptions {
        rows_per_page: 0,
        ..WriteOptions::default()
    };
    assert!(matches!(
        TableWriter::create(&t.join("x"), batch.schema(), o)
            .err()
            .unwrap(),
        Error::Parameter { .. }
    ));
}

#[test]
fn a_column_file_truncated_while_open_is_an_error_never_zeros() {
    // Pages are read from the mapped file; cutting the file under the mapping turns the
    // pages past its new end into zeros, which must be reported, not decoded.
    let (_d, t) = table(0);
    let reader = TableReader::open(&t, &ring()).unwrap();
    let pages = reader.page_count();
    assert!(pages >= 3, "{pages}");
    reader.read_page(3, 0).unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(t.join("3.col"))
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len / 3).unwrap();
    let e = reader
        .read_page(3, pages - 1)
        .expect_err("a page past the file's new end");
    assert!(
        matches!(e, Error::Io { .. } | Error::PageSeal { .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("3.col") || e.to_string().contains("page"),
        "{e}"
    );
}
