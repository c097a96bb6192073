//! A bounded, deterministic fuzz pass over the statistics file reader (stable Rust, part of the
//! normal test suite): the committed corpus (tests/corpus, made by
//! scripts/make-fuzz-corpus.sh) mutated by the seeded mutator of `inpath_core::fuzz`. Every
//! answer must be an error or statistics that write back to exactly the bytes read, whose
//! coefficients compute and merges work.

use inpath_corr::{NanPolicy, Statistics};
use inpath_testkit::fuzz::{corpus, run_checksummed};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

#[test]
fn statistics_reader_survives_mutated_files() {
    let files = corpus(std::path::Path::new(CORPUS)).unwrap();
    assert!(files.len() >= 4);
    for (name, bytes) in &files {
        let stats = Statistics::from_bytes(bytes, name).unwrap();
        assert_eq!(&stats.to_bytes(), bytes, "{name} is canonical");
        assert!(stats.count() > 0 && stats.streams() >= 2, "{name}");
    }
    // Every other file gets its CRC-32 trailer fixed, so the mutation reaches the structure
    // checks behind the checksum (lengths, counts, codes).
    let (errors, total) = run_checksummed(
        &files,
        0x5eed_0004,
        100_000,
        fix_crc,
        |i, name, bytes, bad| match Statistics::from_bytes(bad, "fuzzed statistics") {
            Ok(stats) => {
                let again = stats.to_bytes();
                assert!(
                    again == bad,
                    "{name}: mutation #{i} read as different statistics: first difference at byte {:?} \
                     (lengths {} and {})",
                    again.iter().zip(bad).position(|(a, b)| a != b),
                    again.len(),
                    bad.len()
                );
                let _ = stats.pearson(NanPolicy::Nan);
                let original = Statistics::from_bytes(bytes, name).unwrap();
                let mut merged = original.clone();
                let _ = merged.merge(&stats);
                false
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("fuzzed statistics"), "{text}");
                true
            }
        },
    );
    assert!(
        errors * 100 > total * 99,
        "{errors} of {total} mutations caught"
    );
}

/// Found by the fuzz pass above (mutation #2191 of u64-spearman.stats with its CRC fixed): the
/// reader accepted non-zero reserved bytes 12..16 and wrote them back as zeros, so a file did
/// not read back to itself. FORMATS.md says they are zero; the reader now refuses others.
#[test]
fn regression_reserved_bytes_must_be_zero() {
    let path = format!("{CORPUS}/u64-spearman.stats");
    let mut bytes = std::fs::read(path).unwrap();
    bytes[12] = 3;
    bytes[13] = 21;
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    let err = Statistics::from_bytes(&bytes, "r.stats")
        .unwrap_err()
        .to_string();
    assert!(err.contains("reserved bytes 12 to 15"), "{err}");
    assert!(err.contains("statistics file r.stats"), "{err}");
}

/// Rewrites the CRC-32 trailer after an edit.
fn fix_crc(bytes: &mut [u8]) {
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
}
