//! Every AES kernel this CPU has within the `INPATH_ISA` cap (`kernel::aes_kernels()`:
//! `library`, `aesni`, `vaes256`, `vaes512`; `INPATH_AES` only picks the process's kernel among
//! them, so it does not shorten this list) against the RustCrypto
//! crates (`AnyAes::library` and the mode crates directly): every key size, lengths 0..=300
//! bytes and large, unaligned slices, counter wraps, uneven CBC pages, every chunking of the
//! streaming modes, and GCM against the `aes-gcm` crate (tags and tamper rejection). On a CPU
//! with VAES and AVX-512 this runs all four kernels in one process (the `ni` kernels at both
//! widths, AES-NI on xmm and VAES on ymm, and the 512-bit `vaes` kernel), so the suite needs
//! no rerun under `INPATH_ISA=avx2` or `portable` for them; `INPATH_ISA=portable` leaves only
//! the library, which the tests then check against the mode crates. The page layer at every
//! kernel is in `page.rs` (`every_kernel_seals_the_same_records_and_opens_them`).
//!
//! (This module holds what were `tests/ni.rs`, `tests/vaes.rs` and `tests/kernel.rs`: the
//! latter two ran the chosen kernel only, and what they checked beyond `ni.rs` is folded in
//! here, looping over every kernel.)

use crate::common::library::{check_gcm, keys, lengths, lib_cbc_dec, lib_cbc_enc, lib_stream};
use inpath_core::isa::{self, Level};
use inpath_seal::aes::{self as modes, AnyAes, Block, CipherStream, Direction, Key, Mode, Padding};
use inpath_seal::gen;
use inpath_seal::kernel::{self, AesKernel};

/// Every kernel that may run here, with every key size.
fn kernels_and_keys() -> Vec<(AesKernel, Key)> {
    let kernels = kernel::aes_kernels();
    assert_eq!(kernels.first(), Some(&AesKernel::Library));
    kernels
        .into_iter()
        .flat_map(|k| keys().into_iter().map(move |key| (k, key)))
        .collect()
}

#[test]
fn the_chosen_kernel_honours_the_cap_the_choice_and_the_cpu() {
    let chosen = kernel::aes_kernel();
    // The best allowed kernel at or below the one `INPATH_AES` names (if it names one).
    let choice = kernel::aes_choice();
    assert_eq!(
        choice,
        std::env::var(kernel::AES_ENV)
            .ok()
            .and_then(|v| AesKernel::parse(&v))
    );
    let best = kernel::aes_kernels()
        .into_iter()
        .rev()
        .find(|&k| choice.is_none_or(|c| k <= c));
    assert_eq!(Some(chosen), best);
    if choice.is_none() {
        assert_eq!(kernel::aes_kernels().last(), Some(&chosen));
    }
    // `INPATH_AES` is a choice, not a cap: every kernel within `INPATH_ISA` stays available.
    assert_eq!(
        kernel::aes_kernels(),
        AesKernel::ALL
            .into_iter()
            .filter(|k| k.level() <= isa::effective() && k.on_cpu())
            .collect::<Vec<_>>()
    );
    assert!(chosen.level() <= isa::effective());
    let key = &keys()[2];
    assert_eq!(AnyAes::new(key).kernel(), chosen);
    assert_eq!(modes::Gcm::new(key).unwrap().kernel(), chosen);
    assert_eq!(AnyAes::library(key).kernel(), AesKernel::Library);
    // `accelerated` means "not the library", for the chosen kernel and every other.
    assert_eq!(AnyAes::new(key).accelerated(), chosen != AesKernel::Library);
    assert!(!AnyAes::library(key).accelerated());
    for k in kernel::aes_kernels() {
        let aes = AnyAes::with_kernel(key, k).unwrap();
        assert_eq!(aes.accelerated(), k != AesKernel::Library, "{k}");
    }
    if isa::effective() == Level::Portable {
        assert_eq!(chosen, AesKernel::Library);
    }
    if choice == Some(AesKernel::Library) {
        assert_eq!(chosen, AesKernel::Library);
    }
    #[cfg(target_arch = "x86_64")]
    {
        if isa::effective() >= Level::Avx2
            && choice.is_none()
            && std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
        {
            // An AVX2 machine with AES-NI never runs the library path.
            assert!(chosen >= AesKernel::Aesni, "{chosen}");
            assert!(kernel::aes_kernels().contains(&AesKernel::Aesni));
            if std::arch::is_x86_feature_detected!("vaes")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
            {
                assert!(chosen >= AesKernel::Vaes256, "{chosen}");
                assert!(kernel::aes_kernels().contains(&AesKernel::Vaes256));
            }
        }
        // The 512-bit kernel is chosen exactly where the CPU has VAES and AVX-512, the level
        // is AVX-512 and `INPATH_AES` does not pick a lower one (was tests/vaes.rs).
        let vaes512 = std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && isa::effective() == Level::Avx512
            && choice.is_none_or(|c| c == AesKernel::Vaes512);
        assert_eq!(chosen == AesKernel::Vaes512, vaes512, "{chosen}");
    }
    // Kernels above the cap are refused, not silently replaced, here and in the page layer.
    let ring = crate::common::ring();
    for k in AesKernel::ALL {
        assert_eq!(AnyAes::with_kernel(key, k).is_some(), k.allowed(), "{k}");
        assert_eq!(
            inpath_seal::Unsealer::with_kernel(&ring, k).is_some(),
            k.allowed(),
            "{k}"
        );
        let config = inpath_seal::SealConfig {
            compression: inpath_seal::Compression::None,
            cipher: inpath_seal::Cipher::Ctr,
        };
        let sealer = inpath_seal::Sealer::with_kernel(config, Some((256, key)), [0; 8], k);
        assert_eq!(sealer.is_ok(), k.allowed(), "{k}");
    }
    assert_eq!(AesKernel::parse("VAES256"), Some(AesKernel::Vaes256));
    assert_eq!(AesKernel::parse("sse9"), None);
}

#[test]
fn ecb_cbc_ctr_equal_the_library_for_all_lengths_and_offsets() {
    for (kern, key) in kernels_and_keys() {
        let fast = AnyAes::with_kernel(&key, kern).unwrap();
        assert_eq!(fast.kernel(), kern);
        let lib = AnyAes::library(&key);
        let iv: [u8; 16] = gen::random_bytes(16, key.len() as u64).try_into().unwrap();
        let big = gen::random_bytes(100_003 + 64, 9);
        for len in lengths() {
            for offset in [0usize, 1, 7] {
                let data = &big[offset..offset + len];
                let blocks = &data[..len / 16 * 16];
                let bits = key.bits();
                // CTR, any length.
                let mut a = data.to_vec();
                let mut b = data.to_vec();
                modes::ctr_apply(&fast, &iv, &mut a);
                modes::ctr_apply_library(&lib, &iv, &mut b);
                assert_eq!(a, b, "{kern} ctr AES-{bits} len {len}");
                let mut c = vec![0x33u8; len];
                kernel::ctr_apply_to(&fast, &iv, data, &mut c);
                assert_eq!(c, b, "{kern} ctr out of place AES-{bits} len {len}");
                // ECB both ways.
                let mut a = blocks.to_vec();
                let mut b = blocks.to_vec();
                modes::ecb_encrypt(&fast, &mut a);
                lib.encrypt_blocks(Block::slice_as_chunks_mut(&mut b).0);
                assert_eq!(a, b, "{kern} ecb enc AES-{bits} len {len}");
                modes::ecb_decrypt(&fast, &mut a);
                assert_eq!(a, blocks, "{kern} ecb dec AES-{bits} len {len}");
                // CBC both ways.
                let mut a = blocks.to_vec();
                let mut b = blocks.to_vec();
                modes::cbc_encrypt(&fast, &iv, &mut a);
                lib_cbc_enc(&key, &iv, &mut b);
                assert_eq!(a, b, "{kern} cbc enc AES-{bits} len {len}");
                let mut c = b.clone();
                modes::cbc_decrypt(&fast, &iv, &mut a);
                lib_cbc_dec(&key, &iv, &mut c);
                assert_eq!(a, c, "{kern} cbc dec AES-{bits} len {len}");
                assert_eq!(a, blocks, "{kern} cbc round trip AES-{bits} len {len}");
            }
        }
    }
}

/// Counter blocks that carry across the 32-bit and 64-bit words and wrap the whole 128 bits,
/// over lengths around the batch sizes of the kernels (the batched library path encrypts 512
/// counter blocks per call) and large ones (was also tests/kernel.rs, batched CTR).
#[test]
fn ctr_carries_across_the_32_and_64_bit_words() {
    for (kern, key) in kernels_and_keys() {
        let fast = AnyAes::with_kernel(&key, kern).unwrap();
        let lib = AnyAes::library(&key);
        let mut ivs: Vec<[u8; 16]> = vec![
            [0u8; 16],
            [0xff; 16],
            gen::random_bytes(16, 5).try_into().unwrap(),
        ];
        for low in [0xffff_fff0u32, 0xffff_ffff, 0xffff_ff80] {
            let mut iv = [0x11u8; 16];
            iv[12..].copy_from_slice(&low.to_be_bytes());
            ivs.push(iv);
            iv[8..12].copy_from_slice(&[0xff; 4]);
            ivs.push(iv);
        }
        // Wraps the low 64 bits and the whole 128 bits within a few blocks.
        let mut near_wrap = [0xffu8; 16];
        near_wrap[15] = 0xf0;
        ivs.push(near_wrap);
        for iv in ivs {
            for len in [
                0usize, 1, 15, 16, 17, 255, 256, 257, 2047, 2048, 2049, 4096, 5000, 8193, 100_000,
            ] {
                let data = gen::random_bytes(len, len as u64);
                let mut a = data.clone();
                let mut b = data.clone();
                modes::ctr_apply(&fast, &iv, &mut a);
                modes::ctr_apply_library(&lib, &iv, &mut b);
                assert_eq!(a, b, "{kern} AES-{} iv {iv:02x?} len {len}", key.bits());
                let mut c = vec![0u8; len];
                kernel::ctr_apply_to(&fast, &iv, &data, &mut c);
                assert_eq!(
                    c,
                    b,
                    "{kern} out of place, AES-{} iv {iv:02x?} len {len}",
                    key.bits()
                );
            }
        }
    }
}

/// `cbc_encrypt_lanes` against the library's CBC page by page, with each lane's chaining value
/// out: any number of lanes, uneven lengths (some empty), short pages and pages of up to 299
/// blocks (the second shape was tests/kernel.rs).
#[test]
fn multi_page_cbc_equals_library_cbc_for_up_to_40_uneven_pages() {
    let shapes: [fn(usize) -> usize; 2] = [|i| (i * 53 + 7) % 97, |i| (i * 37) % 300];
    for (kern, key) in kernels_and_keys() {
        let fast = AnyAes::with_kernel(&key, kern).unwrap();
        for (s, blocks) in shapes.iter().enumerate() {
            for lanes in [1usize, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 40] {
                let pages: Vec<Vec<u8>> = (0..lanes)
                    .map(|i| gen::random_bytes(16 * blocks(i), i as u64))
                    .collect();
                let ivs: Vec<[u8; 16]> = (0..lanes)
                    .map(|i| gen::random_bytes(16, 500 + i as u64).try_into().unwrap())
                    .collect();
                let mut expected = pages.clone();
                for (p, iv) in expected.iter_mut().zip(&ivs) {
                    lib_cbc_enc(&key, iv, p);
                }
                let mut got = pages.clone();
                let mut refs: Vec<(Block, &mut [u8])> = got
                    .iter_mut()
                    .zip(&ivs)
                    .map(|(p, iv)| (Block::from(*iv), p.as_mut_slice()))
                    .collect();
                kernel::cbc_encrypt_lanes(&fast, &mut refs);
                // Each lane's chaining value is its last ciphertext block (or the IV if empty).
                for ((iv_out, _), (page, iv)) in refs.iter().zip(expected.iter().zip(&ivs)) {
                    let want: [u8; 16] = page
                        .len()
                        .checked_sub(16)
                        .map_or(*iv, |at| page[at..].try_into().unwrap());
                    assert_eq!(<[u8; 16]>::from(*iv_out), want);
                }
                drop(refs);
                assert_eq!(
                    got,
                    expected,
                    "{kern} AES-{} {lanes} lanes, shape {s}",
                    key.bits()
                );
            }
        }
    }
}

/// The stream modes through `CipherStream` on every kernel, and through the one-call
/// `modes::apply` (the chosen kernel; was tests/vaes.rs), against the mode crates.
#[test]
fn stream_modes_equal_the_library_for_every_length() {
    let chosen = kernel::aes_kernel();
    for (kern, key) in kernels_and_keys() {
        let iv: [u8; 16] = gen::random_bytes(16, 77).try_into().unwrap();
        for (mode, dir) in [
            (Mode::Ctr, Direction::Encrypt),
            (Mode::Cfb, Direction::Encrypt),
            (Mode::Cfb, Direction::Decrypt),
            (Mode::Ofb, Direction::Encrypt),
        ] {
            for len in lengths() {
                let data = gen::random_bytes(len, len as u64 + 3);
                let mut want = data.clone();
                lib_stream(&key, mode, dir, &iv, &mut want);
                let mut s =
                    CipherStream::with_kernel(&key, kern, mode, dir, Some(iv), Padding::None)
                        .unwrap();
                let mut got = Vec::new();
                s.push(&data, &mut got).unwrap();
                s.finish(&mut got).unwrap();
                assert_eq!(
                    got,
                    want,
                    "{kern} {mode:?} {dir:?} AES-{} len {len}",
                    key.bits()
                );
                if kern == chosen {
                    let got =
                        modes::apply(&key, mode, dir, Some(iv), Padding::None, &data).unwrap();
                    assert_eq!(
                        got,
                        want,
                        "apply ({kern}) {mode:?} {dir:?} AES-{} len {len}",
                        key.bits()
                    );
                }
            }
        }
    }
}

#[test]
fn any_chunking_of_every_mode_gives_the_one_call_bytes() {
    let data = gen::random_bytes(1500, 5);
    let mut rng = gen::Rng::new(11);
    for (kern, key) in kernels_and_keys() {
        let iv: [u8; 16] = gen::random_bytes(16, 78).try_into().unwrap();
        for mode in Mode::ALL {
            for dir in [Direction::Encrypt, Direction::Decrypt] {
                let padding = if mode.is_block_mode() {
                    Padding::Pkcs7
                } else {
                    Padding::None
                };
                let iv = mode.needs_iv().then_some(iv);
                let input = if dir == Direction::Decrypt && mode.is_block_mode() {
                    modes::apply(&key, mode, Direction::Encrypt, iv, padding, &data).unwrap()
                } else {
                    data.clone()
                };
                let whole = modes::apply(&key, mode, dir, iv, padding, &input).unwrap();
                for _ in 0..30 {
                    let mut s =
                        CipherStream::with_kernel(&key, kern, mode, dir, iv, padding).unwrap();
                    let mut out = Vec::new();
                    let mut at = 0;
                    while at < input.len() {
                        let step = match rng.next_u64() % 4 {
                            0 => 1 + (rng.next_u64() % 3) as usize,
                            1 => 1 + (rng.next_u64() % 17) as usize,
                            2 => 16,
                            _ => 1 + (rng.next_u64() % 700) as usize,
                        };
                        let end = (at + step).min(input.len());
                        s.push(&input[at..end], &mut out).unwrap();
                        at = end;
                    }
                    s.finish(&mut out).unwrap();
                    assert_eq!(out, whole, "{kern} {mode:?} {dir:?} AES-{}", key.bits());
                }
            }
        }
    }
}

#[test]
fn gcm_kernel_equals_the_aes_gcm_crate() {
    use inpath_seal::aes::Gcm;
    let key = Key::new(&gen::random_bytes(32, 4242)).unwrap();
    for kern in kernel::aes_kernels() {
        let fast = Gcm::with_kernel(&key, kern).unwrap().unwrap();
        assert_eq!(fast.kernel(), kern);
        check_gcm(&fast, &key, kern.name());
    }
    assert!(Gcm::new(&Key::new(&[1u8; 16]).unwrap()).is_err());
}
