//! Round trips and properties of the page codec across every tier, and the page layer on every
//! AES kernel the CPU has.

use crate::common::{data, ring, ring_key, tiers, Data, SMALL_SIZES};
use inpath_seal::kernel::{aes_kernels, crc32c_bulk_with, AesKernel};
use inpath_seal::page::{Header, DEFAULT_MAX_PAGE, HEADER_LEN};
use inpath_seal::{Cipher, Compression, SealConfig, Sealer, Unsealer};

fn sealer(config: SealConfig, bits: u32) -> Sealer {
    let key = ring_key(bits.max(128));
    Sealer::with_nonce_prefix(
        config,
        (config.cipher != Cipher::None).then_some((bits, &key)),
        *b"testnonc",
    )
    .unwrap()
}

#[test]
fn every_tier_round_trips_every_size_and_kind() {
    let unsealer = Unsealer::new(&ring());
    for (name, config, bits) in tiers() {
        let mut s = sealer(config, bits);
        for &len in &SMALL_SIZES {
            for kind in [Data::Random, Data::Zero, Data::Text] {
                let page = data(kind, len, len as u64);
                let record = s.seal(&page).unwrap();
                let h = Header::parse(&record, DEFAULT_MAX_PAGE).unwrap();
                assert_eq!(
                    h.record_len() as usize,
                    record.len(),
                    "{name} {len} {kind:?}"
                );
                assert_eq!(h.page_len as usize, len);
                // A record grows by at most the header plus padding or tag.
                assert!(
                    record.len() <= HEADER_LEN + len + 16,
                    "{name} {len} {kind:?}: {} bytes",
                    record.len()
                );
                if config.compression != Compression::None && len >= 4096 {
                    match kind {
                        Data::Random => assert!(h.stored(), "{name}: random pages are stored raw"),
                        _ => assert!(
                            !h.stored() && record.len() < len * 3 / 4,
                            "{name} {kind:?}: compresses to {}",
                            record.len()
                        ),
                    }
                }
                let back = unsealer
                    .unseal(&record)
                    .unwrap_or_else(|e| panic!("{name} {len} {kind:?}: {e}"));
                assert_eq!(back, page, "{name} {len} {kind:?}");
            }
        }
    }
}

#[test]
fn big_pages_round_trip() {
    // 64 MiB in release builds (the suite runs in release); 4 MiB in debug builds.
    let big = if cfg!(debug_assertions) {
        4 << 20
    } else {
        64 << 20
    };
    let unsealer = Unsealer::new(&ring());
    let text = data(Data::Text, big, 7);
    for config in [
        SealConfig {
            compression: Compression::Deflate(1),
            cipher: Cipher::Ctr,
        },
        SealConfig {
            compression: Compression::Lz4,
            cipher: Cipher::Cbc,
        },
        SealConfig {
            compression: Compression::None,
            cipher: Cipher::Gcm,
        },
    ] {
        let mut s = sealer(config, 256);
        let record = s.seal(&text).unwrap();
        assert_eq!(unsealer.unseal(&record).unwrap(), text, "{config:?}");
    }
    let random = data(Data::Random, 16 << 20, 8);
    let mut s = sealer(
        SealConfig {
            compression: Compression::Zstd(1),
            cipher: Cipher::Ecb,
        },
        128,
    );
    let record = s.seal(&random).unwrap();
    assert_eq!(
        record.len(),
        HEADER_LEN + random.len() + 16,
        "stored raw plus ECB padding"
    );
    assert_eq!(unsealer.unseal(&record).unwrap(), random);
}

#[test]
fn batch_is_byte_identical_to_page_by_page_for_any_thread_count() {
    let pages = batch_pages();
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    let unsealer = Unsealer::new(&ring());
    for (name, config, bits) in tiers() {
        let mut one = sealer(config, bits);
        let expected: Vec<Vec<u8>> = refs.iter().map(|p| one.seal(p).unwrap()).collect();
        for threads in [1, 2, 3, 8] {
            let mut batch = sealer(config, bits);
            let got = batch.seal_batch(&refs, threads).unwrap();
            if let Some(why) = first_difference(&got, &expected, &unsealer) {
                panic!("{name}, {threads} threads: {why}; {}", machine());
            }
        }
        let recs: Vec<&[u8]> = expected.iter().map(|r| r.as_slice()).collect();
        for threads in [1, 3] {
            let back: Vec<Vec<u8>> = unsealer
                .unseal_batch(&recs, threads)
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(back, pages, "{name} unseal_batch {threads}");
        }
    }
}

/// The 21 pages of the batch tests: text, random and zero pages of uneven sizes (0 to 18 KiB),
/// some compressible and some stored raw.
fn batch_pages() -> Vec<Vec<u8>> {
    (0..21)
        .map(|i| match i % 3 {
            0 => data(Data::Text, 1000 * i + 5, i as u64),
            1 => data(Data::Random, 4096 + i, i as u64),
            _ => data(Data::Zero, 17 * i, i as u64),
        })
        .collect()
}

/// The page layer at every AES kernel the CPU has (`kernel::aes_kernels()`), in one process:
/// in every tier, sealing page by page and in a batch (multi-page CBC, the fused CTR and CRC
/// pass of stored pages, GCM) gives records byte-identical to the `library` kernel's, and the
/// unsealer of every kernel opens them, and refuses them with a flipped payload bit. The
/// records' CRC-32Cs are those of both CRC libraries (`crc-fast` and the `crc32c` crate),
/// whichever of them this process picked (`kernel::crc_folds_wide`).
#[test]
fn every_kernel_seals_the_same_records_and_opens_them() {
    let mut pages = batch_pages();
    pages.push(data(Data::Random, 50_001, 99)); // several 16 KiB chunks of the fused CTR pass
    pages.push(data(Data::Text, 40_000, 98));
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    let kernels = aes_kernels();
    assert_eq!(kernels.first(), Some(&AesKernel::Library));
    let ring = ring();
    let unsealers: Vec<(AesKernel, Unsealer)> = kernels
        .iter()
        .map(|&k| (k, Unsealer::with_kernel(&ring, k).unwrap()))
        .collect();
    let at_kernel = |config: SealConfig, bits: u32, kernel: AesKernel| {
        let key = ring_key(bits.max(128));
        Sealer::with_kernel(
            config,
            (config.cipher != Cipher::None).then_some((bits, &key)),
            *b"kernelnc",
            kernel,
        )
        .unwrap()
    };
    for (name, config, bits) in tiers() {
        let mut lib = at_kernel(config, bits, AesKernel::Library);
        let want: Vec<Vec<u8>> = refs.iter().map(|p| lib.seal(p).unwrap()).collect();
        for (i, (rec, page)) in want.iter().zip(&pages).enumerate() {
            let h = Header::parse(rec, DEFAULT_MAX_PAGE).unwrap();
            for wide in [false, true] {
                let payload = crc32c_bulk_with(wide, &rec[HEADER_LEN..]);
                assert_eq!(h.payload_crc, payload, "{name} page {i}, wide CRC {wide}");
                if config.cipher != Cipher::Gcm {
                    let page = crc32c_bulk_with(wide, page);
                    assert_eq!(h.page_crc, page, "{name} page {i}, wide CRC {wide}");
                }
            }
        }
        for &kernel in &kernels {
            let mut one = at_kernel(config, bits, kernel);
            let got: Vec<Vec<u8>> = refs.iter().map(|p| one.seal(p).unwrap()).collect();
            if let Some(why) = first_difference(&got, &want, &unsealers[0].1) {
                panic!("{name}, kernel {kernel} page by page: {why}; {}", machine());
            }
            let got = at_kernel(config, bits, kernel)
                .seal_batch(&refs, 3)
                .unwrap();
            if let Some(why) = first_difference(&got, &want, &unsealers[0].1) {
                panic!("{name}, kernel {kernel} batch: {why}; {}", machine());
            }
        }
        // The largest records of both kinds, damaged in their last payload byte.
        let damaged: Vec<Vec<u8>> = want[want.len() - 2..]
            .iter()
            .map(|r| {
                let mut bad = r.clone();
                *bad.last_mut().unwrap() ^= 0x40;
                bad
            })
            .collect();
        for (kernel, unsealer) in &unsealers {
            for (i, (rec, page)) in want.iter().zip(&pages).enumerate() {
                let back = unsealer
                    .unseal(rec)
                    .unwrap_or_else(|e| panic!("{name}, kernel {kernel}, page {i}: {e}"));
                assert_eq!(&back, page, "{name}, kernel {kernel}, page {i}");
            }
            for bad in &damaged {
                assert!(unsealer.unseal(bad).is_err(), "{name}, kernel {kernel}");
            }
        }
    }
}

/// Where two record lists first differ, in a line (the whole vectors would flood the log):
/// the page, both lengths, the first differing byte (header or payload) and whether each record
/// unseals to the page.
fn first_difference(got: &[Vec<u8>], want: &[Vec<u8>], unsealer: &Unsealer) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} records, expected {}", got.len(), want.len()));
    }
    let i = (0..got.len()).find(|&i| got[i] != want[i])?;
    let (g, w) = (&got[i], &want[i]);
    let at = g
        .iter()
        .zip(w.iter())
        .position(|(a, b)| a != b)
        .unwrap_or(g.len().min(w.len()));
    let part = if at < HEADER_LEN { "header" } else { "payload" };
    let unseals = |r: &[u8]| match unsealer.unseal(r) {
        Ok(page) => format!("unseals to {} bytes", page.len()),
        Err(e) => format!("does not unseal: {e}"),
    };
    Some(format!(
        "record {i} differs: {} bytes against {}, first at byte {at} ({part}); got {}, expected {}",
        g.len(),
        w.len(),
        unseals(g),
        unseals(w)
    ))
}

/// The kernels and CPU features behind a result, for failure messages from CI machines.
fn machine() -> String {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut s = format!(
        "AES kernel {}, isal feature {}",
        inpath_seal::kernel::aes_kernel(),
        cfg!(feature = "isal")
    );
    #[cfg(target_arch = "x86_64")]
    {
        let flags = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx512vl", std::arch::is_x86_feature_detected!("avx512vl")),
            ("vaes", std::arch::is_x86_feature_detected!("vaes")),
            (
                "vpclmulqdq",
                std::arch::is_x86_feature_detected!("vpclmulqdq"),
            ),
        ];
        let have: Vec<&str> = flags.iter().filter(|f| f.1).map(|f| f.0).collect();
        s += &format!(", CPU flags [{}]", have.join(" "));
    }
    s
}

#[test]
fn a_record_depends_on_the_page_alone_not_on_the_memory_after_it() {
    // The same page content at the end of buffers followed by different bytes (zeros, ones,
    // a copy of the page's start: a likely match for a match finder that reads too far) seals
    // to the same record in every tier.
    let unsealer = Unsealer::new(&ring());
    for (name, config, bits) in tiers() {
        for (i, len) in [9005usize, 12_005, 65_536 + 3, 100_000]
            .into_iter()
            .enumerate()
        {
            let page = data(Data::Text, len, 40 + i as u64);
            let mut records = Vec::new();
            for tail in [vec![0u8; 4096], vec![0xffu8; 4096], page[..4096].to_vec()] {
                let mut buf = page.clone();
                buf.extend_from_slice(&tail);
                records.push(sealer(config, bits).seal(&buf[..len]).unwrap());
            }
            for r in &records[1..] {
                if let Some(why) =
                    first_difference(std::slice::from_ref(r), &records[..1], &unsealer)
                {
                    panic!("{name}, {len}-byte page: {why}; {}", machine());
                }
            }
        }
    }
}

#[test]
fn reused_buffers_give_the_same_records_and_pages() {
    // Pages of uneven sizes; buffers left over from other (longer, shorter, garbage) records.
    let pages: Vec<Vec<u8>> = (0..37)
        .map(|i| match i % 3 {
            0 => data(Data::Text, 997 * i + 3, i as u64),
            1 => data(Data::Random, 70_000 - 911 * i, i as u64),
            _ => data(Data::Zero, 33 * i, i as u64),
        })
        .collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    let unsealer = Unsealer::new(&ring());
    for (name, config, bits) in tiers() {
        let mut one = sealer(config, bits);
        let expected: Vec<Vec<u8>> = refs.iter().map(|p| one.seal(p).unwrap()).collect();
        let recs: Vec<&[u8]> = expected.iter().map(|r| r.as_slice()).collect();
        // seal_into, one page at a time, into a buffer holding the previous record.
        let mut into = sealer(config, bits);
        let mut buf = vec![0xa5u8; 200_000];
        for (p, want) in refs.iter().zip(&expected) {
            into.seal_into(p, &mut buf).unwrap();
            assert_eq!(&buf, want, "{name} seal_into");
        }
        // seal_batch_into, twice over the same buffers (and once with more buffers than pages).
        let mut batch = sealer(config, bits);
        let mut records: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; i * 3001]).collect();
        for threads in [1, 3] {
            batch
                .seal_batch_into(&refs[..5], &mut records, threads)
                .unwrap();
            batch
                .seal_batch_into(&refs[5..], &mut records, threads)
                .unwrap();
        }
        let mut again = sealer(config, bits);
        let mut first: Vec<Vec<u8>> = Vec::new();
        for _ in 0..2 {
            again.seal_batch_into(&refs[..5], &mut first, 2).unwrap();
            again.seal_batch_into(&refs[5..], &mut first, 2).unwrap();
        }
        assert_eq!(records, first, "{name} seal_batch_into");
        let mut fresh = sealer(config, bits);
        fresh.seal_batch(&refs[..5], 1).unwrap();
        fresh.seal_batch(&refs[5..], 1).unwrap();
        fresh.seal_batch(&refs[..5], 1).unwrap();
        assert_eq!(records, fresh.seal_batch(&refs[5..], 1).unwrap());
        // unseal_batch_into over buffers of other sizes, twice.
        let mut back: Vec<Vec<u8>> = (0..3).map(|i| vec![0x5a; 100_000 * i]).collect();
        for threads in [1, 2] {
            let results = unsealer.unseal_batch_into(&recs, &mut back, threads);
            assert!(results.iter().all(|r| r.is_ok()), "{name}");
            assert_eq!(back, pages, "{name} unseal_batch_into");
        }
        // A damaged record leaves its page empty, the others are opened.
        let mut bad = expected[1].clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let mixed: Vec<&[u8]> = vec![recs[0], &bad, recs[2]];
        let results = unsealer.unseal_batch_into(&mixed, &mut back, 2);
        assert!(
            results[0].is_ok() && results[1].is_err() && results[2].is_ok(),
            "{name}"
        );
        assert!(back[1].is_empty());
        assert_eq!(back[0], pages[0]);
        assert_eq!(back[2], pages[2]);
    }
}

#[test]
fn nonces_are_unique_per_record_and_per_sealer() {
    let key = ring_key(256);
    for cipher in [Cipher::Ctr, Cipher::Cbc, Cipher::Gcm] {
        let config = SealConfig {
            compression: Compression::None,
            cipher,
        };
        let mut a = Sealer::new(config, Some((256, &key))).unwrap();
        let mut b = Sealer::new(config, Some((256, &key))).unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            for s in [&mut a, &mut b] {
                let h = Header::parse(&s.seal(b"page").unwrap(), DEFAULT_MAX_PAGE).unwrap();
                assert!(seen.insert(h.iv), "{cipher:?}: IV repeated");
            }
        }
    }
}

#[test]
fn ecb_leaks_equal_blocks_and_ctr_cbc_do_not() {
    let key = ring_key(256);
    let page = vec![0x41u8; 4096];
    let payload_blocks = |cipher| {
        let mut s = Sealer::new(
            SealConfig {
                compression: Compression::None,
                cipher,
            },
            Some((256, &key)),
        )
        .unwrap();
        let rec = s.seal(&page).unwrap();
        let blocks: std::collections::HashSet<Vec<u8>> = rec[HEADER_LEN..HEADER_LEN + 4096]
            .chunks(16)
            .map(|b| b.to_vec())
            .collect();
        blocks.len()
    };
    assert_eq!(
        payload_blocks(Cipher::Ecb),
        1,
        "ECB maps 256 equal plaintext blocks to one ciphertext block"
    );
    assert_eq!(payload_blocks(Cipher::Ctr), 256);
    assert_eq!(payload_blocks(Cipher::Cbc), 256);
}

#[test]
fn deflate_payload_is_standard_raw_deflate_at_every_level() {
    // Decoded by an independent implementation (zlib-rs through flate2).
    let page = data(Data::Text, 118_784, 3);
    let unsealer = Unsealer::new(&ring());
    for level in 0..=9u8 {
        let mut s = sealer(
            SealConfig {
                compression: Compression::Deflate(level),
                cipher: Cipher::None,
            },
            0,
        );
        let rec = s.seal(&page).unwrap();
        let h = Header::parse(&rec, DEFAULT_MAX_PAGE).unwrap();
        assert_eq!(unsealer.unseal(&rec).unwrap(), page, "level {level}");
        if level == 0 {
            assert!(h.stored(), "level 0 stores the page");
            continue;
        }
        assert!(!h.stored(), "level {level}: text compresses");
        let mut d = flate2::Decompress::new(false);
        let mut out = Vec::with_capacity(page.len() + 1);
        let status = d
            .decompress_vec(
                &rec[HEADER_LEN..],
                &mut out,
                flate2::FlushDecompress::Finish,
            )
            .unwrap();
        assert_eq!(status, flate2::Status::StreamEnd, "level {level}");
        assert_eq!(out, page, "level {level}");
    }
}

#[test]
fn deflate_levels_are_at_least_as_small_as_zlibs() {
    // The promise of `--compress deflate-N`: on 64 KiB pages of lineitem text, at least
    // zlib's own ratio at level N (the C library; within 1%).
    let text = inpath_seal::gen::lineitem_text(4 << 20, 9);
    for level in 1..=9u8 {
        let mut s = sealer(
            SealConfig {
                compression: Compression::Deflate(level),
                cipher: Cipher::None,
            },
            0,
        );
        let (mut ours, mut zlib) = (0usize, 0usize);
        for page in text.chunks(64 << 10) {
            ours += s.seal(page).unwrap().len() - HEADER_LEN;
            zlib += inpath_seal::zlib::deflate_size(page, level).unwrap();
        }
        assert!(
            ours as f64 <= zlib as f64 * 1.01,
            "level {level}: {ours} bytes against zlib's {zlib}"
        );
    }
}

#[test]
fn ctr_records_decrypt_with_the_plain_library_from_the_header_iv() {
    // The payload of a CTR record is AES-CTR of the body with the header's IV as counter block.
    let page = data(Data::Random, 5000, 4);
    let key = ring_key(192);
    let mut s = Sealer::new(
        SealConfig {
            compression: Compression::None,
            cipher: Cipher::Ctr,
        },
        Some((192, &key)),
    )
    .unwrap();
    let rec = s.seal(&page).unwrap();
    let h = Header::parse(&rec, DEFAULT_MAX_PAGE).unwrap();
    let plain = inpath_seal::aes::apply(
        &key,
        inpath_seal::aes::Mode::Ctr,
        inpath_seal::aes::Direction::Decrypt,
        Some(h.iv),
        inpath_seal::aes::Padding::None,
        &rec[HEADER_LEN..],
    )
    .unwrap();
    assert_eq!(plain, page);
}

/// Regression: zlib-rs 0.6 panicked ("buf.len() must fit in remaining()") when DEFLATE of an
/// incompressible page was given less output room than its worst case.
#[test]
fn incompressible_pages_of_many_sizes_are_stored_without_panicking() {
    let random = data(Data::Random, 4 << 20, 1);
    let unsealer = Unsealer::new(&ring());
    for compression in [
        Compression::Deflate(1),
        Compression::Deflate(9),
        Compression::Lz4,
        Compression::Zstd(1),
        Compression::Snappy,
    ] {
        let mut s = sealer(
            SealConfig {
                compression,
                cipher: Cipher::Ctr,
            },
            256,
        );
        for (i, size) in [65536usize, 65535, 65537, 118_784, 1 << 20, 100, 33_000]
            .into_iter()
            .enumerate()
        {
            for page in random[i * 7..].chunks(size).take(4) {
                let rec = s.seal(page).unwrap();
                assert!(Header::parse(&rec, DEFAULT_MAX_PAGE).unwrap().stored());
                assert_eq!(unsealer.unseal(&rec).unwrap(), page);
            }
        }
    }
}
