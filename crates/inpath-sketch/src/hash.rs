//! The one 128-bit hash per item that feeds all three sketches.
//!
//! Two modes ([`HashMode`]):
//! - `Compat`: MurmurHash3_x64_128 (Austin Appleby's canonical algorithm), bit-exact with the
//!   SKT reference software (seed `0xDEADF00D` there). The 128-bit value is
//!   `h = (h2 << 64) | h1` where `h1`, `h2` are the algorithm's two output words.
//! - `Fast` (default): XXH3-128 (xxHash 0.8, default secret, 64-bit seed). For the 4- and 8-byte
//!   items of `u32`/`u64` inputs it is a handful of instructions (one 64×64→128 multiply and an
//!   avalanche), which [`xxh3_128_small`] computes inline; longer values go to the `xxhash-rust`
//!   crate. `h = (high64 << 64) | low64`. Both halves pass SMHasher; the mapping from a 4- or
//!   8-byte item to `h` is injective, so distinct integers never collide.
//!
//! Both kernels are tested against independent implementations (published vectors for Murmur3,
//! the `xxhash-rust` crate for XXH3).

/// Which 128-bit hash the sketch uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashMode {
    /// XXH3-128: the fast default.
    Fast,
    /// MurmurHash3_x64_128: bit-exact with the SKT reference software.
    Compat,
}

impl HashMode {
    /// Every hash.
    pub const ALL: [HashMode; 2] = [HashMode::Fast, HashMode::Compat];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            HashMode::Fast => "fast",
            HashMode::Compat => "compat",
        }
    }

    /// The hash function's name.
    pub fn algorithm(self) -> &'static str {
        match self {
            HashMode::Fast => "XXH3-128",
            HashMode::Compat => "MurmurHash3_x64_128",
        }
    }

    /// The default seed: SKT's `0xDEADF00D` for compat, 0 for fast.
    pub fn default_seed(self) -> u64 {
        match self {
            HashMode::Fast => 0,
            HashMode::Compat => 0xDEAD_F00D,
        }
    }

    /// Largest seed the hash takes (Murmur3 seeds are 32-bit).
    pub fn max_seed(self) -> u64 {
        match self {
            HashMode::Fast => u64::MAX,
            HashMode::Compat => u32::MAX as u64,
        }
    }
}

impl std::str::FromStr for HashMode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(HashMode::Fast),
            "compat" => Ok(HashMode::Compat),
            other => Err(crate::Error::parameter("hash", other, "fast or compat")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MurmurHash3_x64_128

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

#[inline(always)]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[inline(always)]
fn mix_k1(k1: u64) -> u64 {
    k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
}

#[inline(always)]
fn mix_k2(k2: u64) -> u64 {
    k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
}

#[inline(always)]
fn murmur_finish(mut h1: u64, mut h2: u64, len: u64) -> (u64, u64) {
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    (h1, h2)
}

/// MurmurHash3_x64_128 of `data`; returns `(h1, h2)`, the algorithm's two output words.
pub fn murmur3_x64_128(data: &[u8], seed: u32) -> (u64, u64) {
    let mut h1 = seed as u64;
    let mut h2 = seed as u64;
    let mut blocks = data.chunks_exact(16);
    for block in &mut blocks {
        let k1 = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
        let k2 = u64::from_le_bytes(block[8..].try_into().expect("8 bytes"));
        h1 ^= mix_k1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix_k2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    if tail.len() > 8 {
        let mut k2 = 0u64;
        for (i, b) in tail[8..].iter().enumerate() {
            k2 ^= (*b as u64) << (8 * i);
        }
        h2 ^= mix_k2(k2);
    }
    if !tail.is_empty() {
        let mut k1 = 0u64;
        for (i, b) in tail[..tail.len().min(8)].iter().enumerate() {
            k1 ^= (*b as u64) << (8 * i);
        }
        h1 ^= mix_k1(k1);
    }
    murmur_finish(h1, h2, data.len() as u64)
}

/// MurmurHash3_x64_128 of an item of 1 to 8 bytes given as its little-endian value: the same as
/// [`murmur3_x64_128`] of those bytes, without touching memory.
#[inline(always)]
pub fn murmur3_x64_128_small(value: u64, len: u64, seed: u32) -> (u64, u64) {
    let seed = seed as u64;
    murmur_finish(seed ^ mix_k1(value), seed, len)
}

// ---------------------------------------------------------------------------------------------
// XXH3-128

const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME_MX1: u64 = 0x1656_6791_9E37_79F9;
const PRIME_MX2: u64 = 0x9FB2_1C65_1E98_DF25;
/// `readLE64(kSecret + 16) ^ readLE64(kSecret + 24)` of XXH3's default secret.
const SECRET_16_XOR_24: u64 = 0xdb97_9083_e96d_d4de ^ 0x1f67_b3b7_a4a4_4072;

/// XXH3-128 of an item of 4 to 8 bytes (`XXH3_len_4to8_128b`), given as its first and last four
/// little-endian bytes. Returns `(low64, high64)`.
#[inline(always)]
pub fn xxh3_128_small(first4: u32, last4: u32, len: u64, seed: u64) -> (u64, u64) {
    let (keyed, multiplier) = xxh3_small_operands(first4, last4, len, seed);
    let m = (keyed as u128) * (multiplier as u128);
    xxh3_small_finish(m as u64, (m >> 64) as u64)
}

/// The two factors of `XXH3_len_4to8_128b`'s 64×64→128 multiply.
#[inline(always)]
fn xxh3_small_operands(first4: u32, last4: u32, len: u64, seed: u64) -> (u64, u64) {
    let seed = seed ^ (((seed as u32).swap_bytes() as u64) << 32);
    let input64 = (first4 as u64).wrapping_add((last4 as u64) << 32);
    let keyed = input64 ^ SECRET_16_XOR_24.wrapping_add(seed);
    (keyed, PRIME64_1.wrapping_add(len << 2))
}

/// `XXH3_len_4to8_128b` after the multiply: mixes the product's halves into the hash.
#[inline(always)]
fn xxh3_small_finish(mut low: u64, mut high: u64) -> (u64, u64) {
    high = high.wrapping_add(low << 1);
    low ^= high >> 3;
    low ^= low >> 35;
    low = low.wrapping_mul(PRIME_MX2);
    low ^= low >> 28;
    high ^= high >> 37;
    high = high.wrapping_mul(PRIME_MX1);
    high ^= high >> 32;
    (low, high)
}

/// The full 128-bit product of two 64-bit numbers from four 32×32→64 products (`(low, high)`).
/// The same value as a `u128` multiply, but in a form the compiler can vectorise (one
/// `vpmuludq` per partial product, eight items at a time with AVX-512).
#[inline(always)]
pub fn mul_64x64_128_limbs(a: u64, b: u64) -> (u64, u64) {
    const LOW32: u64 = 0xFFFF_FFFF;
    let (a_lo, a_hi) = (a & LOW32, a >> 32);
    let (b_lo, b_hi) = (b & LOW32, b >> 32);
    let ll = a_lo * b_lo;
    let lh = a_lo * b_hi;
    let hl = a_hi * b_lo;
    let hh = a_hi * b_hi;
    // At most (2^32 - 1)^2 + 2 (2^32 - 1) = 2^64 - 1: no overflow.
    let cross = (ll >> 32) + (lh & LOW32) + hl;
    (
        (cross << 32) | (ll & LOW32),
        hh + (lh >> 32) + (cross >> 32),
    )
}

/// [`xxh3_128_small`] with the 128-bit product computed by [`mul_64x64_128_limbs`]: identical
/// output, vectorisable. The kernels use it on CPUs with wide vector units.
#[inline(always)]
pub fn xxh3_128_small_limbs(first4: u32, last4: u32, len: u64, seed: u64) -> (u64, u64) {
    let (keyed, multiplier) = xxh3_small_operands(first4, last4, len, seed);
    let (low, high) = mul_64x64_128_limbs(keyed, multiplier);
    xxh3_small_finish(low, high)
}

/// The high 64 bits of [`xxh3_128_small_limbs`] alone: one 64-bit multiply fewer, for the
/// HyperLogLog-only kernel (its rank needs the low half only when the high half's low bits
/// are all zero, a chance of 2^-(64-P)).
#[inline(always)]
pub fn xxh3_128_small_high_limbs(first4: u32, last4: u32, len: u64, seed: u64) -> u64 {
    let (keyed, multiplier) = xxh3_small_operands(first4, last4, len, seed);
    let (low, mut high) = mul_64x64_128_limbs(keyed, multiplier);
    high = high.wrapping_add(low << 1);
    high ^= high >> 37;
    high = high.wrapping_mul(PRIME_MX1);
    high ^ (high >> 32)
}

/// XXH3-128 of any byte string; returns `(low64, high64)`.
#[inline]
pub fn xxh3_128(data: &[u8], seed: u64) -> (u64, u64) {
    let h = xxhash_rust::xxh3::xxh3_128_with_seed(data, seed);
    (h as u64, (h >> 64) as u64)
}

/// The item hash as `(lo, hi)` 64-bit halves of the 128-bit value `h = (hi << 64) | lo`.
pub type Hash128 = (u64, u64);

/// Hashes a `u32` item (its 4 little-endian bytes).
#[inline(always)]
pub fn hash_u32(mode: HashMode, seed: u64, item: u32) -> Hash128 {
    match mode {
        HashMode::Fast => xxh3_128_small(item, item, 4, seed),
        HashMode::Compat => murmur3_x64_128_small(item as u64, 4, seed as u32),
    }
}

/// Hashes a `u64` item (its 8 little-endian bytes).
#[inline(always)]
pub fn hash_u64(mode: HashMode, seed: u64, item: u64) -> Hash128 {
    match mode {
        HashMode::Fast => xxh3_128_small(item as u32, (item >> 32) as u32, 8, seed),
        HashMode::Compat => murmur3_x64_128_small(item, 8, seed as u32),
    }
}

/// Hashes a value's bytes (a text line or CSV field).
#[inline]
pub fn hash_bytes(mode: HashMode, seed: u64, value: &[u8]) -> Hash128 {
    match mode {
        HashMode::Fast => xxh3_128(value, seed),
        HashMode::Compat => murmur3_x64_128(value, seed as u32),
    }
}

/// Bits beyond the first 128 for parameter sets that need more (only in fast mode): block `k`
/// (k ≥ 1) of the hash stream is derived from `h` by a keyed SplitMix/Murmur finaliser, which is
/// a bijection of each half, so the extension is as well distributed as `h` itself.
#[inline(always)]
pub fn extension_block(h: Hash128, k: u64) -> Hash128 {
    let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let a = fmix64(h.0 ^ key ^ h.1.rotate_left(32));
    let b = fmix64(h.1.wrapping_add(key) ^ a.rotate_left(17));
    (a, b)
}
