//! Known answers for the two hash functions and agreement of the inlined small-item kernels
//! with the general implementations.

use inpath_sketch::hash::{murmur3_x64_128, murmur3_x64_128_small, xxh3_128, xxh3_128_small};
use rand::{Rng, SeedableRng};

/// MurmurHash3_x64_128 `(data, seed, h1, h2)`. Source: Austin Appleby's MurmurHash3.cpp as
/// wrapped by the Python `mmh3` package (`mmh3.hash128(data, seed, x64arch=True, signed=False)`,
/// h1 = low 64 bits). The "quick brown fox" value is the widely published digest
/// `6c1b07bc7bbc4be347939ac4a93c437a` (h1 then h2, little-endian bytes).
const MURMUR3_VECTORS: &[(&[u8], u32, u64, u64)] = &[
    (b"", 0x0, 0x0000000000000000, 0x0000000000000000),
    (b"", 0x1, 0x4610abe56eff5cb5, 0x51622daa78f83583),
    (b"hello", 0x0, 0xcbd8a7b341bd9b02, 0x5b1e906a48ae1d19),
    (b"The quick brown fox jumps over the lazy dog", 0x0, 0xe34bbc7bbc071b6c, 0x7a433ca9c49a9347),
    (b"The quick brown fox jumps over the lazy dog", 0xdeadf00d, 0x506d410b2bdb3f98, 0xa32adb2d8d6658d4),
    (b"*\x00\x00\x00", 0xdeadf00d, 0x773d12858dfea1d1, 0x04d1c58db98ec2b9),
    (b"\x00\x00\x00\x00", 0xdeadf00d, 0x135e37a7cb2203e6, 0x180a7b9449ea1660),
    (b"\xff\xff\xff\xff", 0xdeadf00d, 0x6827870e48bd90d7, 0xf6090059984abc38),
    (
        b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e",
        0x9747b28c,
        0x11402094b0608767,
        0x167613db94750d07,
    ),
];

#[test]
fn murmur3_known_answers() {
    for &(data, seed, h1, h2) in MURMUR3_VECTORS {
        assert_eq!(
            murmur3_x64_128(data, seed),
            (h1, h2),
            "data {data:?} seed {seed:#x}"
        );
    }
}

/// SMHasher's verification value for MurmurHash3_x64_128: hash keys {}, {0}, {0,1}, ...
/// {0..254} with seed 256 − len, hash the concatenated 16-byte results with seed 0, and read
/// the first four bytes: 0x6384BA69 (SMHasher `main.cpp`, `VerificationTest`).
#[test]
fn murmur3_smhasher_verification() {
    let mut key = [0u8; 256];
    let mut hashes = Vec::with_capacity(256 * 16);
    for i in 0..256 {
        key[i] = i as u8;
        let (h1, h2) = murmur3_x64_128(&key[..i], 256 - i as u32);
        hashes.extend_from_slice(&h1.to_le_bytes());
        hashes.extend_from_slice(&h2.to_le_bytes());
    }
    let (h1, _) = murmur3_x64_128(&hashes, 0);
    assert_eq!(h1 as u32, 0x6384_BA69);
}

#[test]
fn murmur3_small_items_equal_the_general_function() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for _ in 0..10_000 {
        let seed: u32 = rng.gen();
        let x: u32 = rng.gen();
        assert_eq!(
            murmur3_x64_128_small(x as u64, 4, seed),
            murmur3_x64_128(&x.to_le_bytes(), seed)
        );
        let y: u64 = rng.gen();
        assert_eq!(
            murmur3_x64_128_small(y, 8, seed),
            murmur3_x64_128(&y.to_le_bytes(), seed)
        );
    }
}

/// XXH3-128 `(data, seed, hash)` from the Python `xxhash` package (`xxh3_128_intdigest`),
/// which wraps the reference C implementation.
const XXH3_VECTORS: &[(&[u8], u64, u128)] = &[
    (b"abcd", 0, 0x8d6b60383dfa90c21be79eecd1b1353d),
    (b"abcdefgh", 7, 0xe2818de7cb015c80ba000497eff26142),
    (b"xxx", 0, 0x8467ca65b94d45f975920d64d617a183),
    (
        b"hello world, this is xxh3",
        123,
        0xc918c4ad52e8140eb8eb8802b0f26260,
    ),
];

#[test]
fn xxh3_known_answers() {
    for &(data, seed, h) in XXH3_VECTORS {
        assert_eq!(
            xxh3_128(data, seed),
            (h as u64, (h >> 64) as u64),
            "data {data:?}"
        );
    }
}

#[test]
fn xxh3_small_items_equal_the_xxhash_crate() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    for i in 0..10_000 {
        let seed: u64 = if i % 3 == 0 { 0 } else { rng.gen() };
        let x: u32 = rng.gen();
        let crate_value = xxhash_rust::xxh3::xxh3_128_with_seed(&x.to_le_bytes(), seed);
        assert_eq!(
            xxh3_128_small(x, x, 4, seed),
            (crate_value as u64, (crate_value >> 64) as u64)
        );
        let y: u64 = rng.gen();
        let crate_value = xxhash_rust::xxh3::xxh3_128_with_seed(&y.to_le_bytes(), seed);
        let small = xxh3_128_small(y as u32, (y >> 32) as u32, 8, seed);
        assert_eq!(small, (crate_value as u64, (crate_value >> 64) as u64));
    }
}

#[test]
fn limb_multiply_and_vectorisable_xxh3_equal_the_u128_versions() {
    use inpath_sketch::hash::{mul_64x64_128_limbs, xxh3_128_small_limbs};
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let edges = [0u64, 1, u32::MAX as u64, 1 << 32, u64::MAX - 1, u64::MAX];
    for &a in &edges {
        for &b in &edges {
            let p = a as u128 * b as u128;
            assert_eq!(
                mul_64x64_128_limbs(a, b),
                (p as u64, (p >> 64) as u64),
                "{a} x {b}"
            );
        }
    }
    for _ in 0..100_000 {
        let (a, b): (u64, u64) = (rng.gen(), rng.gen());
        let p = a as u128 * b as u128;
        assert_eq!(mul_64x64_128_limbs(a, b), (p as u64, (p >> 64) as u64));
        let (x, y, seed): (u32, u32, u64) = (rng.gen(), rng.gen(), rng.gen());
        assert_eq!(
            xxh3_128_small_limbs(x, y, 8, seed),
            xxh3_128_small(x, y, 8, seed)
        );
        assert_eq!(
            xxh3_128_small_limbs(x, x, 4, seed),
            xxh3_128_small(x, x, 4, seed)
        );
    }
}
