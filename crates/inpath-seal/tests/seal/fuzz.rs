//! A brief, deterministic fuzz pass on stable Rust: mutated records and streams from a fixed
//! seed go to `unseal` and to every decompressor. Nothing may panic; each result is an error
//! or a valid result (for a record: the original page, since CRCs cover header and payload).
//! The cargo-fuzz targets in `fuzz/` run the same checks open-ended.

use crate::common::{data, ring, ring_key, Data};
use inpath_seal::codec::{compress, Decompressor, Format};
use inpath_seal::gen::Rng;
use inpath_seal::{Cipher, Compression, SealConfig, Sealer, Unsealer};

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let at = rng.below(v.len() as u64) as usize;
                v[at] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let at = rng.below(v.len() as u64) as usize;
                v[at] = [0, 0xff, 0x7f, 0x80][rng.below(4) as usize];
            }
            2 => v.truncate(rng.below(v.len() as u64 + 1) as usize),
            3 => {
                let at = rng.below(v.len() as u64 + 1) as usize;
                let junk: Vec<u8> = (0..1 + rng.below(16))
                    .map(|_| rng.next_u64() as u8)
                    .collect();
                v.splice(at..at, junk);
            }
            4 if v.len() > 8 => {
                // Copy a run from one place to another (keeps structure, breaks meaning).
                let from = rng.below(v.len() as u64 - 4) as usize;
                let to = rng.below(v.len() as u64 - 4) as usize;
                let len = (1 + rng.below(8) as usize).min(v.len() - from.max(to));
                let run: Vec<u8> = v[from..from + len].to_vec();
                v[to..to + len].copy_from_slice(&run);
            }
            _ => {
                let at = rng.below(v.len() as u64 + 1) as usize;
                v.truncate(at);
                v.extend(std::iter::repeat_n(
                    rng.next_u64() as u8,
                    rng.below(40) as usize,
                ));
            }
        }
    }
    v
}

#[test]
fn unseal_survives_mutated_records() {
    let unsealer = Unsealer::new(&ring()).with_max_page(1 << 20);
    let mut rng = Rng::new(0x5ea1);
    let key = ring_key(256);
    let mut corpus = Vec::new();
    for compression in [
        Compression::None,
        Compression::Deflate(1),
        Compression::Lz4,
        Compression::Zstd(1),
        Compression::Snappy,
    ] {
        for cipher in [
            Cipher::None,
            Cipher::Ecb,
            Cipher::Ctr,
            Cipher::Cbc,
            Cipher::Gcm,
        ] {
            let mut s = Sealer::with_nonce_prefix(
                SealConfig {
                    compression,
                    cipher,
                },
                Some((256, &key)),
                [3; 8],
            )
            .unwrap();
            for len in [0, 40, 1500] {
                let page = data(Data::Text, len, len as u64);
                corpus.push((s.seal(&page).unwrap(), page));
            }
        }
    }
    let mut errors = 0;
    for i in 0..6000 {
        let (record, page) = &corpus[i % corpus.len()];
        let bad = mutate(&mut rng, record);
        match unsealer.unseal(&bad) {
            Ok(out) => assert_eq!(&out, page, "a mutated record opened to a different page"),
            Err(_) => errors += 1,
        }
    }
    assert!(
        errors > 5000,
        "mutations should almost always be caught ({errors})"
    );
}

#[test]
fn decompressors_survive_mutated_streams() {
    let mut rng = Rng::new(0xdec0);
    for format in Format::ALL {
        let corpus: Vec<Vec<u8>> = [
            data(Data::Text, 3000, 1),
            data(Data::Zero, 70_000, 2),
            data(Data::Random, 500, 3),
        ]
        .iter()
        .map(|d| compress(format, None, d).unwrap())
        .collect();
        for i in 0..1500 {
            let bad = mutate(&mut rng, &corpus[i % corpus.len()]);
            let mut d = Decompressor::new(format).with_limit(1 << 22);
            let mut out = Vec::new();
            // Feed in uneven chunks: the state machines must hold up at every boundary.
            let cut = rng.below(bad.len() as u64 + 1) as usize;
            let _ = d
                .push(&bad[..cut], &mut out)
                .and_then(|()| d.push(&bad[cut..], &mut out))
                .and_then(|()| d.finish(&mut out));
            assert!(out.len() <= 1 << 22);
        }
        // Pure noise, too.
        for _ in 0..300 {
            let noise: Vec<u8> = (0..rng.below(200)).map(|_| rng.next_u64() as u8).collect();
            let _ = inpath_seal::codec::decompress(format, &noise, 1 << 22);
        }
    }
}

// ---- The committed corpus (tests/corpus, made by scripts/make-fuzz-corpus.sh) through the
// seeded mutator of `inpath_core::fuzz`: splices across files and length-field edits too.

use inpath_seal::page::{Header, HEADER_LEN};
use inpath_testkit::fuzz::{corpus, Mutator};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

fn test_keys() -> inpath_seal::KeyRing {
    let text = std::fs::read(format!("{CORPUS}/test-keys.txt")).unwrap();
    inpath_seal::keyfile::parse_bytes(zeroize::Zeroizing::new(text))
        .unwrap()
        .ring
}

/// Opens a stream of records the way `inpath unseal` reads it: header, then the length the
/// header gives; `max_page` bounds every allocation.
fn unseal_stream(unsealer: &Unsealer, bytes: &[u8], max_page: u64) -> inpath_seal::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let header = Header::parse(&bytes[at..], max_page)?;
        let len = header.record_len() as usize;
        if bytes.len() - at < len {
            return Err(inpath_seal::Error::Truncated {
                what: "seal record payload",
                needed: len as u64,
                available: (bytes.len() - at) as u64,
            });
        }
        out.extend_from_slice(&unsealer.unseal(&bytes[at..at + len])?);
        at += len;
    }
    Ok(out)
}

#[test]
fn corpus_records_survive_mutation() {
    let files = corpus(std::path::Path::new(&format!("{CORPUS}/unseal"))).unwrap();
    assert!(files.len() >= 5);
    let ring = test_keys();
    let unsealer = Unsealer::new(&ring).with_max_page(1 << 16);
    // Every tier of the corpus holds the same text.
    let plain = unseal_stream(&unsealer, &files[0].1, 1 << 16).unwrap();
    assert!(plain.len() > 1000);
    for (name, bytes) in &files {
        assert_eq!(
            unseal_stream(&unsealer, bytes, 1 << 16).unwrap(),
            plain,
            "{name}"
        );
        assert!(bytes.len() > HEADER_LEN);
    }
    let others: Vec<&[u8]> = files.iter().map(|(_, b)| b.as_slice()).collect();
    let mut m = Mutator::new(0x5eed_0001);
    let (mut errors, mut total) = (0usize, 0usize);
    for i in 0..50_000 {
        let (name, bytes) = &files[i % files.len()];
        let mut bad = m.mutate(bytes, &others);
        // Every other stream gets the first record's payload and header CRCs rewritten, so
        // the mutation reaches the cipher and decompressor behind them.
        if i % 2 == 1 && bad.len() >= HEADER_LEN {
            let end = u64::from_le_bytes(bad[24..32].try_into().unwrap())
                .saturating_add(HEADER_LEN as u64)
                .min(bad.len() as u64) as usize;
            let payload_crc = crc32c::crc32c(&bad[HEADER_LEN..end]);
            bad[52..56].copy_from_slice(&payload_crc.to_le_bytes());
            let header_crc = crc32c::crc32c(&bad[..60]);
            bad[60..64].copy_from_slice(&header_crc.to_le_bytes());
        } else {
            total += 1;
        }
        match unseal_stream(&unsealer, &bad, 1 << 16) {
            // CRCs over header and payload (and GCM's tag): what opens is whole records of the
            // original text, in order (a cut at a record boundary gives a shorter prefix).
            Ok(out) => assert!(
                plain.starts_with(&out),
                "{name}: mutation #{i} opened to other text"
            ),
            Err(_) => errors += 1,
        }
    }
    assert!(
        errors * 10 > total * 9,
        "{errors} of {total} mutations caught"
    );
}

#[test]
fn corpus_streams_survive_mutation() {
    let dir = format!("{CORPUS}/decompress");
    let files = corpus(std::path::Path::new(&dir)).unwrap();
    let original = std::fs::read(format!("{dir}/original.txt")).unwrap();
    let others: Vec<&[u8]> = files.iter().map(|(_, b)| b.as_slice()).collect();
    let mut m = Mutator::new(0x5eed_0002);
    let mut checked = 0;
    for (name, bytes) in &files {
        let Some(ext) = name.rsplit('.').next() else {
            continue;
        };
        let Ok(format) = Format::parse(ext) else {
            continue;
        };
        let want: &[u8] = if name.starts_with("empty") {
            b""
        } else {
            &original
        };
        assert_eq!(
            inpath_seal::codec::decompress(format, bytes, 1 << 20).unwrap(),
            want,
            "{name}"
        );
        checked += 1;
        for _ in 0..2000 {
            let bad = m.mutate(bytes, &others);
            let mut d = Decompressor::new(format).with_limit(1 << 20);
            let mut out = Vec::new();
            let mut from = 0;
            let mut result = Ok(());
            for cut in m.cuts(bad.len()) {
                result = result.and_then(|()| d.push(&bad[from..cut], &mut out));
                from = cut;
            }
            let result = result.and_then(|()| d.finish(&mut out));
            assert!(out.len() <= 1 << 20, "{name}: output past the limit");
            // Formats with a checksum over the content never return other content.
            if result.is_ok() && format != Format::Deflate && !bad.is_empty() {
                assert!(
                    out == want || out.is_empty() || original.starts_with(&out),
                    "{name}: a mutated {} stream decoded to other bytes without an error",
                    format.name()
                );
            }
        }
    }
    assert_eq!(checked, 7, "every format in the corpus");
}

/// Found while fuzzing the record reader: a header whose payload length is near 2^64 (with a
/// page length to match and a valid header CRC) passed the size checks when the page limit was
/// u64::MAX (as `inpath seal inspect` reads), and `record_len()` wrapped around to 53 bytes;
/// `inpath seal inspect` then panicked slicing the record. Such a header is now `TooLarge`.
#[test]
fn regression_payload_length_near_2_pow_64_is_refused() {
    let n = u64::MAX - 10;
    let mut h = Vec::new();
    h.extend_from_slice(b"IPSL");
    h.extend_from_slice(&[1, 64, 0, 0, 0, 0, 0, 0]);
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
    h.extend_from_slice(&[0; 16 + 4 + 4 + 4]);
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(h.len(), HEADER_LEN);
    let err = Header::parse(&h, u64::MAX).unwrap_err().to_string();
    assert!(err.contains("seal record payload length claims"), "{err}");
    let mut record = h.clone();
    record.extend_from_slice(&[0; 100]);
    let ring = inpath_seal::KeyRing::new();
    assert!(Unsealer::new(&ring)
        .with_max_page(u64::MAX)
        .unseal(&record)
        .is_err());
}
