//! Damaged and hostile records: each gives the one error that names what is wrong. The checks
//! where the AES kernel decides (a wrong key, a GCM forgery) run on every kernel the CPU has.

use crate::common::{data, ring, ring_key, unsealers, Data};
use inpath_seal::page::{Header, DEFAULT_MAX_PAGE, HEADER_LEN};
use inpath_seal::{Cipher, Compression, Error, Key, KeyRing, SealConfig, Sealer, Unsealer};

fn record(compression: Compression, cipher: Cipher) -> (Vec<u8>, Vec<u8>) {
    let page = data(Data::Text, 3000, 11);
    let key = ring_key(256);
    let mut s = Sealer::with_nonce_prefix(
        SealConfig {
            compression,
            cipher,
        },
        Some((256, &key)),
        [9; 8],
    )
    .unwrap();
    (s.seal(&page).unwrap(), page)
}

/// Rewrites header bytes and fixes the header CRC, as a forger (or a buggy writer) would.
fn rewrite(rec: &mut [u8], f: impl FnOnce(&mut [u8])) {
    f(&mut rec[..HEADER_LEN]);
    let crc = crc32c::crc32c(&rec[..60]);
    rec[60..64].copy_from_slice(&crc.to_le_bytes());
}

const TIERS: [(Compression, Cipher); 5] = [
    (Compression::Deflate(1), Cipher::Ctr),
    (Compression::Lz4, Cipher::Cbc),
    (Compression::Snappy, Cipher::Ecb),
    (Compression::Zstd(3), Cipher::Gcm),
    (Compression::Deflate(1), Cipher::None),
];

#[test]
fn truncated_records_are_truncated_errors() {
    let u = Unsealer::new(&ring());
    for (comp, cipher) in TIERS {
        let (rec, _) = record(comp, cipher);
        for cut in 0..rec.len() {
            match u.unseal(&rec[..cut]) {
                Err(Error::Truncated {
                    what: "seal record header",
                    ..
                }) => assert!(cut < HEADER_LEN),
                Err(Error::Truncated {
                    what: "seal record payload",
                    needed,
                    available,
                }) => {
                    assert!(cut >= HEADER_LEN);
                    assert_eq!((needed, available), (rec.len() as u64, cut as u64));
                }
                other => panic!("{comp:?}+{cipher:?} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn flipped_header_bits_are_caught() {
    let u = Unsealer::new(&ring());
    for (comp, cipher) in TIERS {
        let (rec, _) = record(comp, cipher);
        for byte in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut bad = rec.clone();
                bad[byte] ^= 1 << bit;
                let err = u.unseal(&bad).unwrap_err();
                match byte {
                    0..=3 => assert!(
                        matches!(err, Error::BadMagic { .. }),
                        "byte {byte}: {err:?}"
                    ),
                    4 => assert!(
                        matches!(err, Error::UnsupportedVersion { .. }),
                        "byte {byte}: {err:?}"
                    ),
                    _ => assert!(
                        matches!(err, Error::HeaderChecksum { .. }),
                        "byte {byte}: {err:?}"
                    ),
                }
            }
        }
    }
}

#[test]
fn flipped_payload_bits_are_damage_not_a_wrong_key() {
    let u = Unsealer::new(&ring());
    for (comp, cipher) in TIERS {
        let (rec, _) = record(comp, cipher);
        for at in (HEADER_LEN..rec.len()).step_by(7) {
            let mut bad = rec.clone();
            bad[at] ^= 0x10;
            let err = u.unseal(&bad).unwrap_err();
            assert!(
                matches!(err, Error::PayloadChecksum { .. }),
                "{comp:?}+{cipher:?} at {at}: {err:?}"
            );
            assert!(err.is_damage());
        }
    }
}

#[test]
fn wrong_key_is_reported_as_wrong_key() {
    let mut wrong = KeyRing::new();
    wrong.insert(256, Key::new(&[0xee; 32]).unwrap());
    let every = unsealers(&wrong);
    for (kern, u) in &every {
        for (comp, cipher) in TIERS {
            let (rec, page) = record(comp, cipher);
            let result = u.unseal(&rec);
            match cipher {
                Cipher::None => assert_eq!(result.unwrap(), page),
                Cipher::Gcm => assert!(
                    matches!(result, Err(Error::AuthenticationFailed { key_id: 256 })),
                    "{kern}: {result:?}"
                ),
                _ => assert!(
                    matches!(result, Err(Error::WrongKey { key_id: 256, .. })),
                    "{kern} {cipher:?}: {result:?}"
                ),
            }
        }
    }
    // Also for pages stored raw (no decompression step to fail): the page CRC tells.
    let key = ring_key(256);
    for cipher in [Cipher::Ecb, Cipher::Ctr, Cipher::Cbc] {
        let mut s = Sealer::new(
            SealConfig {
                compression: Compression::None,
                cipher,
            },
            Some((256, &key)),
        )
        .unwrap();
        let rec = s.seal(&data(Data::Random, 1000, 1)).unwrap();
        for (kern, u) in &every {
            assert!(
                matches!(u.unseal(&rec), Err(Error::WrongKey { .. })),
                "{kern} {cipher:?}"
            );
        }
    }
    // And the chosen kernel's unsealer, as built for everyday use, agrees.
    let (rec, _) = record(Compression::Lz4, Cipher::Gcm);
    assert!(matches!(
        Unsealer::new(&wrong).unseal(&rec),
        Err(Error::AuthenticationFailed { key_id: 256 })
    ));
}

#[test]
fn wrong_key_id_and_wrong_key_size() {
    let (rec, _) = record(Compression::Lz4, Cipher::Ctr);
    let mut other = KeyRing::new();
    other.insert(5, Key::new(&[1; 32]).unwrap());
    match Unsealer::new(&other).unseal(&rec) {
        Err(Error::UnknownKeyId { id: 256, available }) => assert_eq!(available, "id(s) 5"),
        other => panic!("{other:?}"),
    }
    let mut short = KeyRing::new();
    short.insert(256, Key::new(&[1; 16]).unwrap());
    assert!(matches!(
        Unsealer::new(&short).unseal(&rec),
        Err(Error::KeySize {
            id: 256,
            found: 16,
            needed: 32,
            ..
        })
    ));
}

#[test]
fn unknown_version_and_bad_fields() {
    let u = Unsealer::new(&ring());
    let (rec, _) = record(Compression::Deflate(1), Cipher::Cbc);
    let mut v2 = rec.clone();
    rewrite(&mut v2, |h| h[4] = 2);
    assert!(matches!(
        u.unseal(&v2),
        Err(Error::UnsupportedVersion { version: 2, .. })
    ));
    for (byte, value, field) in [
        (5usize, 48u8, "header length"),
        (6, 9, "compression"),
        (8, 7, "cipher"),
        (9, 20, "key length"),
        (10, 0x80, "flags"),
        (10, 0x01, "flags"), // CBC without PADDED
        (11, 1, "reserved"),
    ] {
        let mut bad = rec.clone();
        rewrite(&mut bad, |h| h[byte] = value);
        match u.unseal(&bad) {
            Err(Error::BadHeader { field: f, .. }) => assert_eq!(f, field, "byte {byte}"),
            other => panic!("byte {byte} = {value}: {other:?}"),
        }
    }
    let mut magic = rec.clone();
    magic[..4].copy_from_slice(b"GZIP");
    assert!(matches!(u.unseal(&magic), Err(Error::BadMagic { .. })));
}

#[test]
fn huge_size_claims_are_refused_before_allocating() {
    let u = Unsealer::new(&ring());
    let (rec, _) = record(Compression::Deflate(1), Cipher::Ctr);
    // A page of 1 TiB: over the limit.
    let mut huge = rec.clone();
    rewrite(&mut huge, |h| {
        h[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes())
    });
    assert!(matches!(u.unseal(&huge), Err(Error::TooLarge { claimed, .. }) if claimed == 1 << 40));
    // 512 MiB from a ~1 KiB DEFLATE body: within the limit, impossible for DEFLATE.
    let mut bomb = rec.clone();
    rewrite(&mut bomb, |h| {
        h[16..24].copy_from_slice(&(512u64 << 20).to_le_bytes())
    });
    assert!(
        matches!(
            u.unseal(&bomb),
            Err(Error::BadHeader {
                field: "page length",
                ..
            })
        ),
        "{:?}",
        u.unseal(&bomb)
    );
    // A payload length past the end of the input.
    let mut long = rec.clone();
    rewrite(&mut long, |h| {
        h[24..32].copy_from_slice(&(u64::MAX / 2).to_le_bytes())
    });
    assert!(matches!(
        u.unseal(&long),
        Err(Error::Truncated { .. } | Error::BadHeader { .. })
    ));
    // A smaller limit applies to honest records too.
    let small = Unsealer::new(&ring()).with_max_page(1000);
    assert!(matches!(
        small.unseal(&rec),
        Err(Error::TooLarge {
            claimed: 3000,
            limit: 1000,
            ..
        })
    ));
    assert!(Header::parse(&rec, DEFAULT_MAX_PAGE).is_ok());
}

#[test]
fn bytes_after_a_record_are_reported() {
    let u = Unsealer::new(&ring());
    let (mut rec, _) = record(Compression::Snappy, Cipher::Ctr);
    rec.push(0);
    assert!(matches!(
        u.unseal(&rec),
        Err(Error::TrailingData { bytes: 1, .. })
    ));
}

#[test]
fn gcm_detects_a_forged_payload_with_fixed_crcs() {
    // An attacker can recompute the unkeyed CRCs; GCM still refuses, on every kernel.
    for (kern, u) in unsealers(&ring()) {
        let (mut rec, _) = record(Compression::None, Cipher::Gcm);
        rec[HEADER_LEN + 3] ^= 1;
        let crc = crc32c::crc32c(&rec[HEADER_LEN..]);
        rewrite(&mut rec, |h| h[52..56].copy_from_slice(&crc.to_le_bytes()));
        let result = u.unseal(&rec);
        assert!(
            matches!(result, Err(Error::AuthenticationFailed { .. })),
            "{kern}: {result:?}"
        );
        // In CTR the same forgery flips exactly the same plaintext bit: no integrity, by
        // design. The page CRC then reports it (as a wrong key: the tier cannot tell the two
        // apart).
        let (mut rec, _) = record(Compression::None, Cipher::Ctr);
        rec[HEADER_LEN + 3] ^= 1;
        let crc = crc32c::crc32c(&rec[HEADER_LEN..]);
        rewrite(&mut rec, |h| h[52..56].copy_from_slice(&crc.to_le_bytes()));
        let result = u.unseal(&rec);
        assert!(
            matches!(result, Err(Error::WrongKey { .. })),
            "{kern}: {result:?}"
        );
    }
}

/// `unseal_in` answers every record, whole or damaged anywhere, exactly as `unseal` does, and
/// gives a stored plain page as a slice of the record itself.
#[test]
fn unseal_in_answers_as_unseal() {
    let u = Unsealer::new(&ring());
    let tiers = [
        (Compression::None, Cipher::None),
        (Compression::None, Cipher::Gcm),
        (Compression::None, Cipher::Ctr),
        (Compression::Lz4, Cipher::Gcm),
        (Compression::Deflate(1), Cipher::None),
    ];
    for (comp, cipher) in tiers {
        let (rec, page) = record(comp, cipher);
        let mut buf = vec![7u8; 5];
        let got = u.unseal_in(&rec, &mut buf).unwrap();
        assert_eq!(got, &page[..], "{comp:?}+{cipher:?}");
        if (comp, cipher) == (Compression::None, Cipher::None) {
            assert_eq!(
                got.as_ptr(),
                rec[HEADER_LEN..].as_ptr(),
                "borrowed, not copied"
            );
        }
        let mut variants: Vec<Vec<u8>> = (0..rec.len())
            .step_by(5)
            .map(|at| {
                let mut bad = rec.clone();
                bad[at] ^= 0x21;
                bad
            })
            .collect();
        variants.push([&rec[..], &[0u8]].concat());
        variants.push(rec[..rec.len() - 1].to_vec());
        for bad in variants {
            let want = u.unseal(&bad);
            let mut buf = Vec::new();
            let got = u.unseal_in(&bad, &mut buf).map(<[u8]>::to_vec);
            assert_eq!(
                format!("{got:?}"),
                format!("{want:?}"),
                "{comp:?}+{cipher:?}"
            );
        }
    }
}

/// A stored GCM page with a flipped payload bit is damage (its CRC tells), with the CRC
/// forged to match it is a refused forgery, and the refused output is never handed out.
#[test]
fn stored_gcm_tells_damage_from_forgery() {
    let (rec, _) = record(Compression::None, Cipher::Gcm);
    for (kern, u) in unsealers(&ring()) {
        for at in (HEADER_LEN..rec.len()).step_by(11) {
            let mut bad = rec.clone();
            bad[at] ^= 4;
            let mut buf = Vec::new();
            let err = u.unseal_in(&bad, &mut buf).unwrap_err();
            assert!(
                matches!(err, Error::PayloadChecksum { .. }),
                "{kern} {at}: {err:?}"
            );
            assert!(buf.is_empty(), "nothing left in the buffer after a refusal");
            let crc = crc32c::crc32c(&bad[HEADER_LEN..]);
            rewrite(&mut bad, |h| h[52..56].copy_from_slice(&crc.to_le_bytes()));
            let err = u.unseal_in(&bad, &mut buf).unwrap_err();
            assert!(
                matches!(err, Error::AuthenticationFailed { .. }),
                "{kern} {at}: {err:?}"
            );
            assert!(buf.is_empty(), "{kern}: nothing handed out after a forgery");
        }
    }
}
