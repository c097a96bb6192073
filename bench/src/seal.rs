//! Seal engine timings: raw AES modes, the page codec per tier, page size and thread count, and
//! the HANA trace size mix. Pages are cut from TPC-H `lineitem` text made by the `tpchgen`
//! crate (scale factor 0.1: about 75 MB) and from random bytes. The text is also written to
//! `bench/out/lineitem.tbl` so `bench/seal.py` runs the peers (zlib, OpenSSL) on the same pages.
use crate::timing::{measure, Measurement};
use inpath_seal::aes::{self, AnyAes, Block, CipherStream, Direction, Key, KeyRing, Mode, Padding};
use inpath_seal::kernel;
use inpath_seal::{Cipher, Compression, SealConfig, Sealer, Unsealer};
use std::io::Write;

/// Arguments of `inpath-bench seal`.
#[derive(clap::Args)]
pub struct Args {
    /// Fewer sizes and tiers, fewer repetitions (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Where to write the lineitem text the pages are cut from.
    #[arg(long, default_value = "bench/out/lineitem.tbl")]
    dump: String,
    /// MiB of data per measurement (pages are repeated up to this).
    #[arg(long, default_value_t = 64)]
    mib: usize,
    /// Only one group: aes, page or mix.
    #[arg(long)]
    only: Option<String>,
}

fn lineitem(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 256);
    let generator = tpchgen::generators::LineItemGenerator::new(0.1, 1, 1);
    for row in generator.iter() {
        writeln!(out, "{row}").expect("write to Vec");
        if out.len() >= bytes {
            break;
        }
    }
    out.truncate(bytes);
    out
}

fn tier_name(c: Compression, cipher: Cipher, bits: u32) -> String {
    let cipher = match cipher {
        Cipher::None => "none".to_string(),
        c => format!("aes{bits}-{}", c.name()),
    };
    format!("{}+{}", c.describe(), cipher)
}

/// The HANA trace mix (reference 002, Table 2): page sizes and their shares of accesses.
pub const HANA_DATA_WRITE: [(usize, f64); 8] = [
    (4 << 10, 1.08),
    (16 << 10, 0.92),
    (64 << 10, 45.38),
    (256 << 10, 32.33),
    (1 << 20, 12.28),
    (4 << 20, 3.44),
    (16 << 20, 1.82),
    (118_784, 0.0),
];
/// Log writes: 116 KiB dominates.
pub const HANA_LOG_WRITE: [(usize, f64); 6] = [
    (4 << 10, 3.46),
    (16 << 10, 0.05),
    (64 << 10, 0.01),
    (118_784, 64.64),
    (256 << 10, 0.01),
    (1 << 20, 0.11),
];

/// Page lengths following `mix` (sizes and weights) with a fixed sequence, `total` bytes.
fn mix_pages(mix: &[(usize, f64)], total: usize) -> Vec<usize> {
    let weight: f64 = mix.iter().map(|(_, w)| w).sum();
    let mut rng = inpath_seal::gen::Rng::new(2022);
    let mut sizes = Vec::new();
    let mut sum = 0;
    while sum < total {
        let mut pick = (rng.next_u64() % 1_000_000) as f64 / 1_000_000.0 * weight;
        let mut size = mix[0].0;
        for &(s, w) in mix {
            if pick < w {
                size = s;
                break;
            }
            pick -= w;
        }
        sizes.push(size);
        sum += size;
    }
    sizes
}

fn cut<'a>(data: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut at = 0;
    sizes
        .iter()
        .map(|&s| {
            if at + s > data.len() {
                at = 0;
            }
            let page = &data[at..at + s];
            at += s;
            page
        })
        .collect()
}

/// One page-codec run: data name, data, page size, tiers.
type Run<'a> = (&'a str, &'a [u8], usize, Vec<(Compression, Cipher)>);

/// Runs the seal timings.
pub fn run(args: Args) -> anyhow::Result<Vec<Measurement>> {
    let reps = if args.quick { 3 } else { 7 };
    let total = args.mib << 20;
    let text = lineitem(total.max(64 << 20));
    if let Some(dir) = std::path::Path::new(&args.dump).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.dump, &text)?;
    let random = inpath_seal::gen::random_bytes(total.max(64 << 20), 1);
    let mut out = Vec::new();

    let want = |group: &str| args.only.as_deref().is_none_or(|o| o == group);
    // 1. Raw AES modes on one buffer per call (the page is the unit, as in the reference).
    let sizes: &[usize] = if args.quick {
        &[16 << 10, 1 << 20]
    } else {
        &[4 << 10, 16 << 10, 64 << 10, 1 << 20, 16 << 20]
    };
    for bits in [128u32, 192, 256].into_iter().filter(|_| want("aes")) {
        let key = Key::new(&random[..bits as usize / 8])?;
        let aes = AnyAes::new(&key);
        let iv = [7u8; 16];
        for &size in sizes {
            let count = (total / size).max(1);
            let bytes = (count * size) as u64;
            let mut buf = random[..size].to_vec();
            let mut add = |op: &str, m: Measurement| {
                let mut m = m;
                m.extra = serde_json::json!({"group": "aes", "bits": bits, "op": op, "size": size,
                    "kernel": aes.kernel().name()});
                out.push(m);
            };
            // The one-call modes: (op, label, the call on one buffer).
            type OneCall = fn(&AnyAes, &[u8; 16], &mut [u8]);
            let calls: [(&str, &str, OneCall); 5] = [
                ("ecb-enc", "ecb enc", |a, _, b| aes::ecb_encrypt(a, b)),
                ("ecb-dec", "ecb dec", |a, _, b| aes::ecb_decrypt(a, b)),
                ("ctr", "ctr", aes::ctr_apply),
                ("cbc-enc", "cbc enc", aes::cbc_encrypt),
                ("cbc-dec", "cbc dec", aes::cbc_decrypt),
            ];
            for (op, label, call) in calls {
                add(
                    op,
                    measure(
                        &format!("aes{bits}-{label} {size}"),
                        bytes,
                        count as u64,
                        reps,
                        || {
                            for _ in 0..count {
                                call(&aes, &iv, &mut buf);
                            }
                        },
                    ),
                );
            }
            // CBC encryption of 8 and of 16 independent pages at once (the batch path; a
            // batch interleaves `kernel::LANES` = 16). Pages cut from the random data, wrapping
            // around when the pages exceed it.
            for lanes_n in [8usize, 16] {
                let span = random.len() - size + 1;
                let mut pages: Vec<Vec<u8>> = (0..lanes_n)
                    .map(|i| {
                        let start = (i * size) % span;
                        random[start..start + size].to_vec()
                    })
                    .collect();
                let groups = count.div_ceil(lanes_n);
                let lane_bytes = (groups * lanes_n * size) as u64;
                add(
                    &format!("cbc-enc-{lanes_n}pages"),
                    measure(
                        &format!("aes{bits}-cbc enc {lanes_n} pages {size}"),
                        lane_bytes,
                        (groups * lanes_n) as u64,
                        reps,
                        || {
                            for _ in 0..groups {
                                let mut lanes: Vec<(Block, &mut [u8])> = pages
                                    .iter_mut()
                                    .map(|p| (Block::from(iv), p.as_mut_slice()))
                                    .collect();
                                kernel::cbc_encrypt_lanes(&aes, &mut lanes);
                            }
                        },
                    ),
                );
            }
            for (mode, dir, op) in [
                (Mode::Cfb, Direction::Encrypt, "cfb-enc"),
                (Mode::Cfb, Direction::Decrypt, "cfb-dec"),
                (Mode::Ofb, Direction::Encrypt, "ofb"),
            ] {
                let mut stream = CipherStream::new(&key, mode, dir, Some(iv), Padding::None)?;
                let mut sink = Vec::with_capacity(size);
                add(
                    op,
                    measure(
                        &format!("aes{bits}-{op} {size}"),
                        bytes,
                        count as u64,
                        reps,
                        || {
                            for _ in 0..count {
                                sink.clear();
                                stream.push(&buf, &mut sink).expect("stream");
                            }
                        },
                    ),
                );
            }
        }
    }
    // GCM through the page codec's tier is below; raw GCM here for the cipher table (the
    // library's `Gcm`: the VAES/VPCLMULQDQ kernel where the CPU has it).
    if want("aes") {
        let gcm = aes::Gcm::new(&Key::new(&random[..32])?)?;
        for &size in sizes {
            let count = (total / size).max(1);
            let mut buf = random[..size].to_vec();
            let nonce = [1u8; 12];
            let mut tag = [0u8; 16];
            let mut m = measure(
                &format!("aes256-gcm enc {size}"),
                (count * size) as u64,
                count as u64,
                reps,
                || {
                    for _ in 0..count {
                        tag = gcm.encrypt(&nonce, &[], &mut buf).expect("gcm");
                    }
                },
            );
            m.extra = serde_json::json!({"group": "aes", "bits": 256, "op": "gcm-enc", "size": size,
                "kernel": gcm.kernel().name()});
            out.push(m);
            // Decrypt a valid message every time without re-copying it: CTR is its own inverse,
            // so decrypting C (tag t1) gives P, and P is the ciphertext of C under the same
            // nonce (tag t2); alternate the two tags.
            let mut c = random[..size].to_vec();
            let t1 = gcm.encrypt(&nonce, &[], &mut c)?;
            let mut p = c.clone();
            let t2 = gcm.encrypt(&nonce, &[], &mut p)?;
            buf.copy_from_slice(&c);
            let mut odd = false;
            let mut m = measure(
                &format!("aes256-gcm dec {size}"),
                (count * size) as u64,
                count as u64,
                reps,
                || {
                    for _ in 0..count {
                        let tag = if odd { &t2 } else { &t1 };
                        assert!(gcm.decrypt(&nonce, &[], &mut buf, tag));
                        odd = !odd;
                    }
                },
            );
            m.extra = serde_json::json!({"group": "aes", "bits": 256, "op": "gcm-dec", "size": size,
                "kernel": gcm.kernel().name()});
            out.push(m);
        }
    }

    // 2. The page codec per tier, page size, data and thread count. Records and pages go into
    // buffers reused from one repetition to the next (`seal_batch_into`, `unseal_batch_into`),
    // as an I/O path reuses its buffers; `seal-alloc` rows (64 KiB, one thread) show the cost
    // of a fresh allocation per record (`seal_batch`).
    let key = Key::new(&random[64..96])?;
    let mut ring = KeyRing::new();
    ring.insert(1, key.clone());
    let unsealer = Unsealer::new(&ring);
    let all_tiers: Vec<(Compression, Cipher)> = vec![
        (Compression::None, Cipher::None),
        (Compression::None, Cipher::Ecb),
        (Compression::None, Cipher::Ctr),
        (Compression::None, Cipher::Cbc),
        (Compression::None, Cipher::Gcm),
        (Compression::Deflate(1), Cipher::None),
        (Compression::Deflate(1), Cipher::Ecb),
        (Compression::Deflate(1), Cipher::Ctr),
        (Compression::Deflate(1), Cipher::Cbc),
        (Compression::Deflate(1), Cipher::Gcm),
        (Compression::Deflate(6), Cipher::Gcm),
        (Compression::Lz4, Cipher::None),
        (Compression::Lz4, Cipher::Ctr),
        (Compression::Zstd(1), Cipher::Ctr),
        (Compression::Snappy, Cipher::Ctr),
    ];
    let sweep_tiers: Vec<(Compression, Cipher)> = vec![
        (Compression::None, Cipher::Ctr),
        (Compression::None, Cipher::Cbc),
        (Compression::Deflate(1), Cipher::Ctr),
        (Compression::Deflate(1), Cipher::Cbc),
        (Compression::Lz4, Cipher::Ctr),
    ];
    let page_sizes: Vec<usize> = if args.quick {
        vec![4 << 10, 64 << 10, 118_784, 1 << 20]
    } else {
        vec![
            4 << 10,
            16 << 10,
            64 << 10,
            118_784,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
        ]
    };
    let mut runs: Vec<Run> = Vec::new();
    for &size in &page_sizes {
        let full = matches!(size, 4096 | 65536 | 118_784 | 1048576);
        runs.push((
            "tpch",
            &text,
            size,
            if full {
                all_tiers.clone()
            } else {
                sweep_tiers.clone()
            },
        ));
        if matches!(size, 65536 | 1048576) || (args.quick && size == 65536) {
            runs.push(("random", &random, size, sweep_tiers.clone()));
        }
    }
    for (data_name, data, size, tiers) in runs.into_iter().filter(|_| want("page")) {
        let count = (total / size).max(2);
        let pages = cut(data, &vec![size; count]);
        let bytes: u64 = pages.iter().map(|p| p.len() as u64).sum();
        for &(compression, cipher) in &tiers {
            let config = SealConfig {
                compression,
                cipher,
            };
            let name = tier_name(compression, cipher, 256);
            for threads in [1usize, 2] {
                let mut sealer = Sealer::with_nonce_prefix(config, Some((1, &key)), [5; 8])?;
                let mut records = Vec::new();
                let mut m = measure(
                    &format!("seal {name} {data_name} {size} t{threads}"),
                    bytes,
                    pages.len() as u64,
                    reps,
                    || {
                        sealer
                            .seal_batch_into(&pages, &mut records, threads)
                            .expect("seal");
                    },
                );
                let sealed: u64 = records.iter().map(|r| r.len() as u64).sum();
                m.extra = serde_json::json!({"group": "page", "op": "seal", "tier": name, "data": data_name,
                    "size": size, "threads": threads, "ratio": bytes as f64 / sealed as f64, "sealed_bytes": sealed,
                    "us_per_page": m.median_s / pages.len() as f64 * 1e6});
                out.push(m);
                if size == 65536 && threads == 1 {
                    let mut fresh = Sealer::with_nonce_prefix(config, Some((1, &key)), [5; 8])?;
                    let mut m = measure(
                        &format!("seal-alloc {name} {data_name} {size} t{threads}"),
                        bytes,
                        pages.len() as u64,
                        reps,
                        || {
                            std::hint::black_box(fresh.seal_batch(&pages, threads).expect("seal"));
                        },
                    );
                    let sealed: u64 = records.iter().map(|r| r.len() as u64).sum();
                    m.extra = serde_json::json!({"group": "page", "op": "seal-alloc", "tier": name, "data": data_name,
                        "size": size, "threads": threads, "ratio": bytes as f64 / sealed as f64,
                        "us_per_page": m.median_s / pages.len() as f64 * 1e6});
                    out.push(m);
                }
                let refs: Vec<&[u8]> = records.iter().map(|r| r.as_slice()).collect();
                let mut back = Vec::new();
                let mut m = measure(
                    &format!("unseal {name} {data_name} {size} t{threads}"),
                    bytes,
                    pages.len() as u64,
                    reps,
                    || {
                        let results = unsealer.unseal_batch_into(&refs, &mut back, threads);
                        assert!(results.iter().all(|r| r.is_ok()));
                    },
                );
                m.extra = serde_json::json!({"group": "page", "op": "unseal", "tier": name, "data": data_name,
                    "size": size, "threads": threads, "ratio": bytes as f64 / sealed as f64, "sealed_bytes": sealed,
                    "us_per_page": m.median_s / pages.len() as f64 * 1e6});
                out.push(m);
            }
        }
    }

    // 3. The HANA trace size mix.
    for (mix_name, mix) in [
        ("hana-data-write", &HANA_DATA_WRITE[..]),
        ("hana-log-write", &HANA_LOG_WRITE[..]),
    ]
    .into_iter()
    .filter(|_| want("mix"))
    {
        let sizes = mix_pages(mix, total.max(64 << 20));
        let pages = cut(&text, &sizes);
        let bytes: u64 = pages.iter().map(|p| p.len() as u64).sum();
        for &(compression, cipher) in &[
            (Compression::Deflate(1), Cipher::Ecb),
            (Compression::Deflate(1), Cipher::Ctr),
            (Compression::Deflate(1), Cipher::Cbc),
            (Compression::Lz4, Cipher::Ctr),
            (Compression::None, Cipher::Ctr),
            (Compression::None, Cipher::Cbc),
        ] {
            let name = tier_name(compression, cipher, 256);
            for threads in [1usize, 2] {
                let mut sealer = Sealer::with_nonce_prefix(
                    SealConfig {
                        compression,
                        cipher,
                    },
                    Some((1, &key)),
                    [6; 8],
                )?;
                let mut records = Vec::new();
                let mut m = measure(
                    &format!("seal {name} {mix_name} t{threads}"),
                    bytes,
                    pages.len() as u64,
                    reps,
                    || {
                        sealer
                            .seal_batch_into(&pages, &mut records, threads)
                            .expect("seal");
                    },
                );
                let sealed: u64 = records.iter().map(|r| r.len() as u64).sum();
                m.extra = serde_json::json!({"group": "mix", "op": "seal", "tier": name, "data": mix_name,
                    "threads": threads, "ratio": bytes as f64 / sealed as f64, "pages": pages.len(),
                    "sizes": sizes.iter().take(pages.len()).collect::<Vec<_>>()});
                out.push(m);
            }
        }
    }
    Ok(out)
}
