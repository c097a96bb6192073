//! A brief, deterministic fuzz pass on stable Rust: mutated records and streams from a fixed
//! seed go to `unseal` and to every decompressor. Nothing may panic; each result is an error
//! or a valid result (for a record: the original page, since CRCs cover header and payload).
//! The cargo-fuzz targets in `fuzz/` run the same checks open-ended.

mod common;

use common::{data, ring, ring_key, Data};
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
