//! The sketch file: round trips, and every kind of damage is a clear error.

use crate::common::u32_items;
use inpath_core::Error;
use inpath_sketch::format::{from_bytes, to_bytes};
use inpath_sketch::{HashMode, ItemKind, Params, Sketch};

fn sample(kind: ItemKind, hash: HashMode) -> Sketch {
    let mut sketch = Sketch::new(Params::with_hash(hash), kind).unwrap();
    match kind {
        ItemKind::U32 => sketch.update_u32(&u32_items(1, 20_000, 5_000)).unwrap(),
        ItemKind::U64 => sketch.update_u64(&[1, 2, 3, u64::MAX]).unwrap(),
        ItemKind::Bytes => sketch
            .update_values(["a", "b", "3.5", "-2", "b"].iter().map(|s| s.as_bytes()))
            .unwrap(),
    }
    sketch
}

fn corrupt_detail(bytes: &[u8]) -> String {
    match from_bytes(bytes, "test file").unwrap_err() {
        Error::Corrupt { what, detail } => {
            assert_eq!(what, "test file");
            detail
        }
        other => panic!("expected a Corrupt error, got {other}"),
    }
}

#[test]
fn round_trip_every_kind_and_hash() {
    for kind in [ItemKind::U32, ItemKind::U64, ItemKind::Bytes] {
        for hash in [HashMode::Fast, HashMode::Compat] {
            let sketch = sample(kind, hash);
            let bytes = to_bytes(&sketch);
            let back = from_bytes(&bytes, "x").unwrap();
            assert!(back.same_state(&sketch), "{kind:?} {hash:?}");
            assert_eq!(to_bytes(&back), bytes);
        }
        let empty = Sketch::new(Params::default(), kind).unwrap();
        assert!(from_bytes(&to_bytes(&empty), "x")
            .unwrap()
            .same_state(&empty));
    }
}

#[test]
fn a_loaded_sketch_keeps_counting_and_merging() {
    let sketch = sample(ItemKind::U32, HashMode::Fast);
    let mut loaded = from_bytes(&to_bytes(&sketch), "x").unwrap();
    let mut direct = sketch.clone();
    let more = u32_items(2, 10_000, 5_000);
    loaded.update_u32(&more).unwrap();
    direct.update_u32(&more).unwrap();
    assert!(loaded.same_state(&direct));
}

#[test]
fn the_header_layout_is_stable() {
    let bytes = to_bytes(&sample(ItemKind::U32, HashMode::Compat));
    assert_eq!(&bytes[..8], b"INPSKTCH");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    assert_eq!(&bytes[10..17], &[1, 0, 16, 6, 13, 6, 13]);
    assert_eq!(
        u64::from_le_bytes(bytes[24..32].try_into().unwrap()),
        0xDEADF00D
    );
    assert_eq!(
        u64::from_le_bytes(bytes[32..40].try_into().unwrap()),
        20_000
    );
    assert_eq!(bytes.len(), 64 + (1 << 16) + 2 * 8 * 6 * (1 << 13) + 4);
}

#[test]
fn damage_is_reported() {
    let good = to_bytes(&sample(ItemKind::U32, HashMode::Fast));
    assert!(corrupt_detail(&good[..good.len() - 1]).contains("truncated"));
    assert!(corrupt_detail(&good[..40]).contains("shorter than"));
    assert!(corrupt_detail(b"").contains("shorter than"));
    let mut extra = good.clone();
    extra.push(0);
    assert!(corrupt_detail(&extra).contains("extra bytes"));
    let mut magic = good.clone();
    magic[0] = b'X';
    assert!(corrupt_detail(&magic).contains("not a sketch file"));
    let mut version = good.clone();
    version[8] = 3;
    assert!(corrupt_detail(&version).contains("version 3"));
    let mut params = good.clone();
    params[12] = 30;
    assert!(corrupt_detail(&params).contains("hll_p = 30"));
    let mut reserved = good.clone();
    reserved[20] = 1;
    assert!(corrupt_detail(&reserved).contains("reserved"));
    let mut hash = good.clone();
    hash[10] = 9;
    assert!(corrupt_detail(&hash).contains("hash code"));
    // A flipped bit anywhere in the body is caught by the checksum.
    for at in [70, 64 + (1 << 16) + 5, good.len() - 10] {
        let mut flipped = good.clone();
        flipped[at] ^= 0x10;
        assert!(
            corrupt_detail(&flipped).contains("checksum"),
            "flip at {at}"
        );
    }
}

#[test]
fn a_huge_claimed_size_is_refused_before_allocating() {
    let mut header = to_bytes(&sample(ItemKind::U32, HashMode::Fast))[..100].to_vec();
    header[13] = 16; // 16 rows
    header[14] = 20; // of 2^20 counters: the file would need 256 MiB
    assert!(corrupt_detail(&header).contains("truncated"));
}

#[test]
fn impossible_register_values_are_refused_even_with_a_valid_checksum() {
    let mut bytes = to_bytes(&sample(ItemKind::U32, HashMode::Fast));
    bytes[64] = 200;
    let body = bytes.len() - 4;
    let crc = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    assert!(corrupt_detail(&bytes).contains("HLL register 0 holds 200"));
}

/// A brief fuzz pass with a fixed seed: random bit flips, truncations, extensions and header
/// rewrites of a valid file must give an error or a sketch, never a panic.
#[test]
fn mutated_files_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(2024);
    let small = Params {
        hll_p: 4,
        cm_rows: 2,
        cm_p: 4,
        agms_rows: 2,
        agms_p: 4,
        ..Params::default()
    };
    let mut sketch = Sketch::new(small, ItemKind::U32).unwrap();
    sketch.update_u32(&u32_items(3, 1000, 100)).unwrap();
    let good = to_bytes(&sketch);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut bytes = good.clone();
        match rng.gen_range(0..4) {
            0 => {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..bytes.len());
                    bytes[at] ^= 1 << rng.gen_range(0..8);
                }
            }
            1 => bytes.truncate(rng.gen_range(0..bytes.len())),
            2 => bytes.extend((0..rng.gen_range(1..64)).map(|_| rng.gen::<u8>())),
            _ => {
                let at = rng.gen_range(8..64);
                bytes[at] = rng.gen();
                // Make the checksum valid so the structural checks are reached too.
                let body = bytes.len() - 4;
                let crc = crc32fast::hash(&bytes[..body]);
                bytes[body..].copy_from_slice(&crc.to_le_bytes());
            }
        }
        if let Ok(back) = from_bytes(&bytes, "fuzz") {
            accepted += 1;
            let _ = back.summary(inpath_sketch::Estimator::Ertl);
        }
    }
    // Only header rewrites that keep the file meaningful (seed, reserved bytes...) may pass.
    assert!(
        accepted < 20_000 / 4,
        "{accepted} mutated files were accepted"
    );
}
