//! The page store and its reader: round trips in every seal tier, tags and ports under random
//! completion orders, and the bad inputs with their exact errors.

use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
use inpath_store::{
    FlashReader, HandleRef, Jitter, Literal, PutOptions, ReaderConfig, Store, StoreError, Tier,
};
use std::collections::BTreeSet;
use std::time::Duration;

fn data(len: usize, seed: u64) -> Vec<u8> {
    // Compressible text with some noise.
    let mut x = seed;
    (0..len)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 7 == 0 {
                (x >> 56) as u8
            } else {
                b"the quick brown fox\n"[i % 20]
            }
        })
        .collect()
}

#[test]
fn put_ls_read_rm_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let bytes = data(50_000, 1);
    let a = store
        .put_reader(&bytes[..], "a", &PutOptions::default())
        .unwrap();
    let b = store
        .put_reader(&b""[..], "empty", &PutOptions::default())
        .unwrap();
    assert_eq!(
        (a.handle, a.generation, a.size, a.pages()),
        (1, 1, 50_000, 7)
    );
    assert_eq!((b.handle, b.size, b.pages()), (2, 0, 0));
    assert_eq!(a.tier, Tier::Raw);

    let store = Store::open(dir.path()).unwrap(); // the catalog survives a reopen
    assert_eq!(store.entries().len(), 2);
    assert_eq!(store.read(1.into(), 0, 50_000).unwrap(), bytes);
    for (off, len) in [
        (0u64, 1u64),
        (8191, 2),
        (8192, 8192),
        (49_999, 1),
        (50_000, 0),
        (3, 20_000),
    ] {
        assert_eq!(
            store.read(1.into(), off, len).unwrap(),
            &bytes[off as usize..(off + len) as usize]
        );
    }
    assert_eq!(store.read(2.into(), 0, 0).unwrap(), b"");

    let mut store = store;
    let removed = store.remove(HandleRef::parse("1@1").unwrap()).unwrap();
    assert_eq!(removed.name, "a");
    assert_eq!(store.entries().len(), 1);
    assert!(!dir.path().join("pages/1-1.pages").exists());
    // Ids are never reused.
    let c = store
        .put_reader(&b"x"[..], "c", &PutOptions::default())
        .unwrap();
    assert_eq!(c.handle, 3);
}

fn keys() -> (KeyRing, Vec<(u32, Key)>) {
    let mut ring = KeyRing::new();
    let mut list = Vec::new();
    for (id, len) in [(1u32, 16usize), (2, 24), (3, 32)] {
        let bytes: Vec<u8> = (0..len as u8)
            .map(|i| i.wrapping_mul(37) ^ id as u8)
            .collect();
        ring.insert(id, Key::new(&bytes).unwrap());
        list.push((id, Key::new(&bytes).unwrap()));
    }
    (ring, list)
}

#[test]
fn sealed_round_trip_in_every_tier() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, list) = keys();
    let mut store = Store::create(dir.path()).unwrap().with_keys(&ring);
    let bytes = data(40_000, 2);
    let readers = all_read_paths(dir.path());
    let want = {
        let mut n = 0;
        for i in 0..bytes.len() {
            n += bytes[i..].starts_with(b"fox") as u64;
        }
        n
    };
    let mut n = 0;
    for compression in [
        Compression::None,
        Compression::Deflate(1),
        Compression::Lz4,
        Compression::Zstd(3),
        Compression::Snappy,
    ] {
        for cipher in [
            Cipher::None,
            Cipher::Ecb,
            Cipher::Ctr,
            Cipher::Cbc,
            Cipher::Gcm,
        ] {
            let key_ids: &[u32] = match cipher {
                Cipher::None => &[0],
                Cipher::Gcm => &[3],
                _ => &[1, 2, 3],
            };
            for &id in key_ids {
                let key = list.iter().find(|(i, _)| *i == id).map(|(i, k)| (*i, k));
                let config = SealConfig {
                    compression,
                    cipher,
                };
                let opts = PutOptions {
                    page_size: 4096,
                    seal: Some((config, key)),
                };
                n += 1;
                let name = format!("f{n}");
                let e = store.put_reader(&bytes[..], &name, &opts).unwrap();
                assert_eq!(e.tier, Tier::Sealed);
                let what = format!("{compression:?} {cipher:?} key {id}: {}", e.codec);
                assert_eq!(
                    store.read(e.handle.into(), 0, e.size).unwrap(),
                    bytes,
                    "{what}"
                );
                assert_eq!(
                    store.read(e.handle.into(), 4000, 200).unwrap(),
                    &bytes[4000..4200],
                    "{what}"
                );
                let handle = store.open_handle(e.handle.into()).unwrap();
                for reader in &readers {
                    let hits = inpath_store::kernel::run(
                        reader,
                        &handle,
                        &Literal::new(b"fox", false).unwrap(),
                        3,
                    )
                    .unwrap();
                    assert_eq!(hits.matches, want, "{what} {reader:?}");
                }
            }
        }
    }
    // Compression shrinks the stored pages.
    let deflated = store
        .entries()
        .iter()
        .find(|e| e.codec == "deflate-1+none")
        .unwrap();
    assert!(
        deflated.stored_bytes() < deflated.size,
        "{}",
        deflated.stored_bytes()
    );
}

#[test]
fn tags_complete_once_and_ports_are_fifo_under_random_orders() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let bytes = data(512 * 150 + 77, 3);
    let opts = PutOptions {
        page_size: 512,
        ..PutOptions::default()
    };
    let e = store.put_reader(&bytes[..], "f", &opts).unwrap();
    let handle = store.open_handle(e.handle.into()).unwrap();
    for seed in [1u64, 2, 3, 42] {
        // Reads of one page for two seeds, of three pages (runs cut at the range) for two.
        let segment = if seed % 2 == 0 { 512 } else { 3 * 512 };
        let reader = FlashReader::new(ReaderConfig {
            workers: 6,
            depth: 8,
            segment,
            jitter: Some(Jitter {
                seed,
                max: Duration::from_micros(300),
            }),
            ..ReaderConfig::default()
        });
        // Several ports at once, from several threads, over overlapping ranges.
        let ranges = [
            (0u64, bytes.len() as u64),
            (1000, 30_000),
            (511, 2),
            (70_000, 6_877),
            (5, 0),
        ];
        let results: Vec<Vec<inpath_store::Chunk>> = std::thread::scope(|s| {
            let tasks: Vec<_> = ranges
                .iter()
                .map(|&(off, len)| {
                    let reader = &reader;
                    let handle = &handle;
                    s.spawn(move || {
                        reader
                            .request(handle, off, len)
                            .unwrap()
                            .map(|c| c.unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            tasks.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut tags = BTreeSet::new();
        let mut total = 0;
        let mut inversions = 0;
        for (&(off, len), chunks) in ranges.iter().zip(&results) {
            // FIFO: pages in order, bytes exactly the range.
            let pages: Vec<u64> = chunks
                .iter()
                .flat_map(|c| {
                    assert!(c.pages >= 1 && c.pages * 512 <= segment);
                    c.page..c.page + c.pages
                })
                .collect();
            let first = off / 512;
            let expect: Vec<u64> = if len == 0 {
                vec![]
            } else {
                (first..(off + len).div_ceil(512)).collect()
            };
            assert_eq!(pages, expect, "seed {seed} range {off}+{len}");
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.bytes().to_vec()).collect();
            assert_eq!(joined, &bytes[off as usize..(off + len) as usize]);
            for w in chunks.windows(2) {
                inversions += (w[1].completion < w[0].completion) as usize;
            }
            for c in chunks {
                assert!(tags.insert(c.tag), "tag {} delivered twice", c.tag);
                total += 1;
            }
        }
        // Every tag completed exactly once: as many completions as tags, none repeated.
        assert_eq!(reader.completed(), total as u64, "seed {seed}");
        assert_eq!(tags.len(), total);
        assert!(
            inversions > 0,
            "seed {seed}: reads completed in order, the test shows nothing"
        );
    }
}

#[test]
fn a_port_dropped_early_does_not_stall_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let bytes = data(512 * 100, 4);
    let opts = PutOptions {
        page_size: 512,
        ..PutOptions::default()
    };
    let e = store.put_reader(&bytes[..], "f", &opts).unwrap();
    let handle = store.open_handle(e.handle.into()).unwrap();
    let reader = FlashReader::new(ReaderConfig {
        workers: 2,
        depth: 4,
        segment: 512,
        ..ReaderConfig::default()
    });
    for _ in 0..20 {
        let mut port = reader.request(&handle, 0, bytes.len() as u64).unwrap();
        port.next_chunk().unwrap().unwrap();
    }
    let all: Vec<u8> = reader
        .request(&handle, 0, bytes.len() as u64)
        .unwrap()
        .flat_map(|c| c.unwrap().bytes().to_vec())
        .collect();
    assert_eq!(all, bytes);
}

#[test]
fn unknown_and_stale_handles_and_ranges_past_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    store
        .put_reader(&b"version one"[..], "f", &PutOptions::default())
        .unwrap();
    let e = store
        .put_reader(&b"version two!"[..], "f", &PutOptions::default())
        .unwrap();
    assert_eq!((e.handle, e.generation), (1, 2));
    assert!(
        !dir.path().join("pages/1-1.pages").exists(),
        "old generation removed"
    );
    assert_eq!(
        store.read("1@2".parse_handle(), 0, 12).unwrap(),
        b"version two!"
    );

    let err = store.read("1@1".parse_handle(), 0, 1).unwrap_err();
    assert!(matches!(
        err,
        StoreError::StaleHandle {
            handle: 1,
            asked: 1,
            current: 2
        }
    ));
    assert_eq!(
        err.to_string(),
        "stale handle 1@1: the store holds generation 2 of it (the file was replaced; read 1@2 \
         or 1)"
    );
    let err = store.read(9.into(), 0, 1).unwrap_err();
    assert!(matches!(err, StoreError::UnknownHandle { handle: 9, .. }));
    assert!(
        err.to_string().starts_with("unknown handle 9 in store "),
        "{err}"
    );
    let err = store.read(1.into(), 5, 8).unwrap_err();
    assert!(matches!(
        err,
        StoreError::RangePastEnd {
            handle: 1,
            offset: 5,
            length: 8,
            size: 12
        }
    ));
    assert_eq!(
        err.to_string(),
        "range 5..13 of handle 1 is past the end of the file (12 bytes)"
    );
    let err = store.read(1.into(), u64::MAX, 2).unwrap_err();
    assert!(matches!(err, StoreError::RangePastEnd { .. }), "{err}");
    let handle = store.open_handle(1.into()).unwrap();
    let reader = FlashReader::new(ReaderConfig::default());
    assert!(matches!(
        reader.request(&handle, 12, 1),
        Err(StoreError::RangePastEnd { .. })
    ));
    assert!(matches!(
        store.remove(9.into()),
        Err(StoreError::UnknownHandle { .. })
    ));
}

trait ParseHandle {
    fn parse_handle(self) -> HandleRef;
}
impl ParseHandle for &str {
    fn parse_handle(self) -> HandleRef {
        HandleRef::parse(self).unwrap()
    }
}

#[test]
fn a_damaged_catalog_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    store
        .put_reader(&b"abc"[..], "f", &PutOptions::default())
        .unwrap();
    let path = dir.path().join("catalog");
    let good = std::fs::read(&path).unwrap();

    let mut bad = good.clone();
    bad[30] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::CatalogDamaged { .. }), "{err:?}");
    assert!(err.to_string().contains("is damaged: CRC-32 is "), "{err}");

    std::fs::write(&path, b"hello, this is not a catalog at all").unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a store catalog"), "{err}");

    std::fs::write(&path, &good[..10]).unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("shorter than the 28-byte header"),
        "{err}"
    );
    // `create` does not paper over a damaged catalog either.
    assert!(matches!(
        Store::create(dir.path()),
        Err(StoreError::CatalogDamaged { .. })
    ));

    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        Store::open(dir.path()),
        Err(StoreError::NotAStore { .. })
    ));
}

/// A catalog of 256 KiB or more is parsed from a mapping instead of a copy: the same entries
/// as the copy gives, and the same refusal of a damaged one.
#[test]
fn a_large_catalog_reads_the_same_mapped_and_damage_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let opts = PutOptions {
        page_size: 512,
        ..PutOptions::default()
    };
    // 24,000 pages of 512 bytes: a 288 KB extent map.
    let bytes = data(24_000 * 512 - 100, 9);
    store.put_reader(&bytes[..], "big", &opts).unwrap();
    store.put_reader(&b"abc"[..], "small", &opts).unwrap();
    let path = dir.path().join("catalog");
    let good = std::fs::read(&path).unwrap();
    assert!(good.len() >= 256 << 10, "{} bytes", good.len());
    let copied = inpath_store::catalog::Catalog::from_bytes(&good, &path).unwrap();
    let opened = Store::open(dir.path()).unwrap();
    assert_eq!(opened.entries(), &copied.entries[..]);
    assert_eq!(opened.entries()[0].pages(), 24_000);
    let h = opened
        .open_handle(opened.handle_ref("big").unwrap())
        .unwrap();
    assert_eq!(h.read(0, bytes.len() as u64).unwrap(), bytes);

    let mut bad = good.clone();
    let at = good.len() - 1000;
    bad[at] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("is damaged: CRC-32 is "), "{err}");
    std::fs::write(&path, &good[..good.len() - 4000]).unwrap();
    let err = Store::open(dir.path()).unwrap_err();
    assert!(matches!(err, StoreError::CatalogDamaged { .. }), "{err:?}");
}

#[test]
fn damaged_and_wrongly_keyed_sealed_pages_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, list) = keys();
    let mut store = Store::create(dir.path()).unwrap().with_keys(&ring);
    let bytes = data(10_000, 5);
    let key = list.iter().find(|(i, _)| *i == 3).map(|(i, k)| (*i, k));
    for (name, cipher) in [("gcm", Cipher::Gcm), ("cbc", Cipher::Cbc)] {
        let opts = PutOptions {
            page_size: 4096,
            seal: Some((
                SealConfig {
                    compression: Compression::Deflate(1),
                    cipher,
                },
                key,
            )),
        };
        store.put_reader(&bytes[..], name, &opts).unwrap();
    }
    // Wrong key: same id, other bytes.
    let mut wrong = KeyRing::new();
    wrong.insert(3, Key::new(&[0x55; 32]).unwrap());
    let other = Store::open(dir.path()).unwrap().with_keys(&wrong);
    let err = other.read(1.into(), 0, 10).unwrap_err();
    match &err {
        StoreError::Unseal {
            handle: 1,
            page: 0,
            source,
        } => assert!(
            matches!(
                source,
                inpath_seal::Error::AuthenticationFailed { key_id: 3 }
            ),
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(err.to_string(), "page 0 of handle 1 does not unseal");
    let err = other.read(2.into(), 0, 10).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Unseal {
                source: inpath_seal::Error::WrongKey { key_id: 3, .. },
                ..
            }
        ),
        "{err:?}"
    );
    // No keys at all.
    let err = Store::open(dir.path())
        .unwrap()
        .read(1.into(), 0, 1)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::KeyNeeded { handle: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("a key file is needed"), "{err}");

    // Damage: flip a payload byte of the second page of handle 1.
    let e = store.resolve(1.into()).unwrap().clone();
    let path = dir.path().join("pages").join(e.data_file_name());
    let mut raw = std::fs::read(&path).unwrap();
    raw[e.extents[1].offset as usize + 100] ^= 0x10;
    std::fs::write(&path, &raw).unwrap();
    let err = store.read(1.into(), 0, e.size).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Unseal {
                page: 1,
                source: inpath_seal::Error::PayloadChecksum { .. },
                ..
            }
        ),
        "{err:?}"
    );
    // The first page still reads.
    assert_eq!(store.read(1.into(), 0, 4096).unwrap(), &bytes[..4096]);
}

/// A reader for each read path: the mapped file (lanes read it themselves), the workers with
/// runs of pages, and the workers with `O_DIRECT` where the filesystem under `dir` allows it.
fn all_read_paths(dir: &std::path::Path) -> Vec<FlashReader> {
    let mut readers = vec![
        FlashReader::new(ReaderConfig::default()),
        FlashReader::new(ReaderConfig {
            mapped: false,
            segment: 3 * 4096,
            ..ReaderConfig::default()
        }),
    ];
    let probe = dir.join("direct-probe");
    std::fs::write(&probe, [0u8; 4096]).unwrap();
    let direct_ok = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok()
    };
    std::fs::remove_file(&probe).unwrap();
    if direct_ok {
        readers.push(FlashReader::new(ReaderConfig {
            direct: true,
            segment: 5 * 4096,
            ..ReaderConfig::default()
        }));
    } else {
        eprintln!(
            "O_DIRECT is not available under {}: not tested",
            dir.display()
        );
    }
    readers
}

#[test]
fn every_read_path_gives_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    // Odd sizes: a short last page, ranges that start and end inside pages.
    let bytes = data(4096 * 37 + 1234, 8);
    let opts = PutOptions {
        page_size: 4096,
        ..PutOptions::default()
    };
    let e = store.put_reader(&bytes[..], "f", &opts).unwrap();
    let handle = store.open_handle(e.handle.into()).unwrap();
    for reader in all_read_paths(dir.path()) {
        for (off, len) in [
            (0u64, bytes.len() as u64),
            (1, 4095),
            (4095, 50_000),
            (150_000, 2_786),
        ] {
            let got: Vec<u8> = reader
                .request(&handle, off, len)
                .unwrap()
                .flat_map(|c| c.unwrap().bytes().to_vec())
                .collect();
            assert_eq!(
                got,
                &bytes[off as usize..(off + len) as usize],
                "{reader:?} {off}+{len}"
            );
        }
        let before = reader.counters();
        let hits =
            inpath_store::kernel::run(&reader, &handle, &Literal::new(b"fox", true).unwrap(), 2)
                .unwrap();
        let want: Vec<u64> = (0..bytes.len())
            .filter(|&i| bytes[i..].starts_with(b"fox"))
            .map(|i| i as u64)
            .collect();
        assert_eq!(hits.offsets, want, "{reader:?}");
        let after = reader.counters();
        if reader.config().mapped && !reader.config().direct {
            assert_eq!(after, before, "the mapped path does not use the workers");
        } else {
            // 38 pages; the first lane reads 2 bytes into the second's first page.
            assert_eq!(after.pages - before.pages, 39, "{reader:?}");
            assert_eq!(after.in_flight, 0);
        }
    }
}

#[test]
fn a_truncated_raw_data_file_is_a_damaged_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let bytes = data(20_000, 6);
    let e = store
        .put_reader(&bytes[..], "f", &PutOptions::default())
        .unwrap();
    let path = dir.path().join("pages").join(e.data_file_name());
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(10_000).unwrap();
    let err = store.read(1.into(), 0, 20_000).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::PageDamaged {
                handle: 1,
                page: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("truncated data file"), "{err}");
    // Kernels see it too, on every read path.
    let handle = store.open_handle(1.into()).unwrap();
    for reader in all_read_paths(dir.path()) {
        let err =
            inpath_store::kernel::run(&reader, &handle, &Literal::new(b"x", false).unwrap(), 2)
                .unwrap_err();
        assert!(
            err.to_string().contains("truncated data file"),
            "{reader:?}: {err}"
        );
    }
}

#[test]
fn bad_put_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let err = store
        .put_reader(
            &b"x"[..],
            "f",
            &PutOptions {
                page_size: 100,
                seal: None,
            },
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "page size = 100 is out of range: 512 to 16777216 bytes"
    );
    let err = store
        .put_reader(
            &b"x"[..],
            "f",
            &PutOptions {
                page_size: 4096,
                seal: Some((SealConfig::default(), None)),
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Parameter { name: "key", .. }),
        "{err:?}"
    );
    assert!(store.entries().is_empty());
}
