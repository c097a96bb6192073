//! A bounded, deterministic fuzz pass over the sketch file reader (stable Rust, part of the
//! normal test suite): the committed corpus (tests/corpus, made by
//! scripts/make-fuzz-corpus.sh) mutated by the seeded mutator of `inpath_core::fuzz`. Every
//! answer must be an error or a sketch that writes back to exactly the bytes read (the format
//! is canonical and checksummed), whose summary, queries and merges work.

use inpath_sketch::{format, Estimator};
use inpath_testkit::fuzz::{corpus, run_checksummed};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

#[test]
fn sketch_reader_survives_mutated_files() {
    let files = corpus(std::path::Path::new(CORPUS)).unwrap();
    assert!(files.len() >= 3);
    for (name, bytes) in &files {
        let sketch = format::from_bytes(bytes, name).unwrap();
        assert_eq!(&format::to_bytes(&sketch), bytes, "{name} is canonical");
        assert!(sketch.count() > 0, "{name}");
    }
    // Every other file gets its CRC-32 trailer fixed, so the mutation reaches the structure
    // checks behind the checksum (lengths, counts, codes).
    let (errors, total) = run_checksummed(
        &files,
        0x5eed_0003,
        100_000,
        fix_crc,
        |i, name, bytes, bad| match format::from_bytes(bad, "fuzzed sketch") {
            Ok(sketch) => {
                let again = format::to_bytes(&sketch);
                assert!(
                    again == bad,
                    "{name}: mutation #{i} read as a different sketch: first difference at byte {:?} \
                     (lengths {} and {})",
                    again.iter().zip(bad).position(|(a, b)| a != b),
                    again.len(),
                    bad.len()
                );
                let _ = sketch.summary(Estimator::Ertl);
                let _ = sketch.summary(Estimator::Reference);
                let _ = sketch.frequency("1");
                let original = format::from_bytes(bytes, name).unwrap();
                let mut merged = original.clone();
                let _ = merged.merge(&sketch);
                false
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("fuzzed sketch"), "{text}");
                true
            }
        },
    );
    assert!(
        errors * 100 > total * 99,
        "{errors} of {total} mutations caught"
    );
}

/// Rewrites the CRC-32 trailer after an edit.
fn fix_crc(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}

/// Found by the fuzz pass above (mutation #31 of lines-fast.skt with its CRC fixed): a
/// Fast-AGMS counter larger than the item count was accepted, then cut to 32 bits by the
/// in-memory counter tiers, so the sketch held other values than the file. The reader now
/// refuses any counter larger in magnitude than the count (each item moves one counter per row
/// by one), for Count-Min too (whose counters above 2^63 were silently clamped).
#[test]
fn regression_counters_larger_than_the_count_are_refused() {
    let path = format!("{CORPUS}/lines-fast.skt");
    let original = std::fs::read(path).unwrap();
    let sketch = format::from_bytes(&original, "a.skt").unwrap();
    let hll = 1usize << sketch.params().hll_p;
    let cm = 8 * sketch.params().cm_rows as usize * (1usize << sketch.params().cm_p);
    let agms_at = 64 + hll + cm;
    for (at, value, what) in [
        (
            agms_at + 8,
            1i64 << 40,
            "Fast-AGMS counter 1 holds 1099511627776",
        ),
        (
            agms_at,
            -(1i64 << 33),
            "Fast-AGMS counter 0 holds -8589934592",
        ),
        (
            64 + hll + 16,
            -1,
            "Count-Min counter 2 holds 18446744073709551615",
        ),
    ] {
        let mut bytes = original.clone();
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        fix_crc(&mut bytes);
        let err = format::from_bytes(&bytes, "a.skt").unwrap_err().to_string();
        assert!(err.contains(what), "{err}");
        assert!(err.contains("but the file counts only 300 items"), "{err}");
    }
}

/// Found by the fuzz pass above (mutation #3263 of u32.skt with its CRC fixed): an integer
/// sketch whose "items min/max cover" field differed from its count was accepted and written
/// back with the count there. The reader now refuses min/max fields that do not fit the count.
#[test]
fn regression_min_max_fields_must_fit_the_count() {
    let path = format!("{CORPUS}/u32.skt");
    let original = std::fs::read(path).unwrap();
    let mut bytes = original.clone();
    bytes[56] ^= 0x40;
    fix_crc(&mut bytes);
    let err = format::from_bytes(&bytes, "u.skt").unwrap_err().to_string();
    assert!(err.contains("min/max fields"), "{err}");
    // An empty integer sketch must store the empty encoding.
    let lines = std::fs::read(format!("{CORPUS}/lines-fast.skt")).unwrap();
    let mut empty = format::from_bytes(&lines, "l.skt").unwrap();
    empty.clear();
    let mut bytes = format::to_bytes(&empty);
    assert!(format::from_bytes(&bytes, "e.skt").is_ok());
    bytes[40] = 0;
    bytes[48] = 0x10;
    fix_crc(&mut bytes);
    let err = format::from_bytes(&bytes, "e.skt").unwrap_err().to_string();
    assert!(err.contains("min/max fields"), "{err}");
}
