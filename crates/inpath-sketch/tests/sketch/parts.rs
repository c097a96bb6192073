//! Keeping only some sketches (`--sketches`): the kept ones hold exactly the state a full sketch
//! holds, the others are absent everywhere (state, file, summary, queries); every kernel level
//! the CPU supports gives the same state for every item kind, hash mode, layout and choice.
use crate::common::{self, le_bytes, u32_items};
use inpath_core::run_slice;
use inpath_sketch::arch::{supported_levels, Level};
use inpath_sketch::{format, Estimator, HashMode, ItemKind, Params, Parts, Sketch, SketchEngine};
use rand::Rng;

/// Every non-empty choice of sketches.
fn choices() -> Vec<Parts> {
    (1..8u8)
        .map(|bits| Parts {
            hll: bits & 1 != 0,
            cm: bits & 2 != 0,
            agms: bits & 4 != 0,
        })
        .collect()
}

fn full_and_partial(params: Params, parts: Parts, bytes: &[u8]) -> (Sketch, Sketch) {
    let mut full = Sketch::new(params, ItemKind::U32).unwrap();
    full.update_u32_le(bytes).unwrap();
    let mut partial = Sketch::new(params.with_parts(parts), ItemKind::U32).unwrap();
    partial.update_u32_le(bytes).unwrap();
    (full, partial)
}

fn assert_kept_parts_equal(full: &Sketch, partial: &Sketch, parts: Parts, context: &str) {
    assert_eq!(partial.count(), full.count(), "{context}: {parts}");
    assert_eq!(partial.extremes(), full.extremes(), "{context}: {parts}");
    if parts.hll {
        assert_eq!(
            partial.hll_registers(),
            full.hll_registers(),
            "{context}: {parts}"
        );
    } else {
        assert!(partial.hll_registers().is_empty());
        assert_eq!(partial.cardinality(Estimator::Ertl), None);
    }
    if parts.cm {
        assert_eq!(
            partial.cm_counters(),
            full.cm_counters(),
            "{context}: {parts}"
        );
    } else {
        assert!(partial.cm_counters().is_empty());
        assert!(partial.count_min_report(Estimator::Ertl).is_none());
        let err = partial.frequency("7").unwrap_err().to_string();
        assert!(err.contains("keeps no Count-Min"), "{err}");
    }
    if parts.agms {
        assert_eq!(
            partial.agms_counters(),
            full.agms_counters(),
            "{context}: {parts}"
        );
    } else {
        assert!(partial.agms_counters().is_empty());
        assert_eq!(partial.f2(), None);
    }
}

/// A non-default layout with rows beyond the first 128 hash bits (fast mode only): the kernel's
/// generic copy, with extension blocks.
fn wide() -> Params {
    Params {
        hll_p: 12,
        cm_rows: 12,
        cm_p: 15,
        agms_rows: 9,
        agms_p: 14,
        ..Params::default()
    }
}

#[test]
fn kept_sketches_equal_the_full_sketch_in_both_hash_modes() {
    // 300,000 items cross the hot counter tier's fold.
    let bytes = le_bytes(&u32_items(17, 300_000, 1 << 20));
    for hash in [HashMode::Fast, HashMode::Compat] {
        for parts in choices() {
            let (full, partial) = full_and_partial(Params::with_hash(hash), parts, &bytes);
            assert_kept_parts_equal(&full, &partial, parts, &format!("{hash:?}"));
        }
    }
    // A non-default layout (rows beyond the first 128 hash bits) takes the generic kernel.
    for parts in choices() {
        let (full, partial) = full_and_partial(wide(), parts, &bytes);
        assert_kept_parts_equal(&full, &partial, parts, "wide");
    }
}

/// The layouts every kernel level is compared on: the SKT default (the kernel's copy with
/// constant shifts) in both hash modes, the wide layout (fast mode, extension blocks) and a
/// small non-default layout that compat mode allows (the generic copy without extension blocks).
fn level_layouts() -> Vec<(&'static str, Params)> {
    vec![
        ("default fast", Params::with_hash(HashMode::Fast)),
        ("default compat", Params::with_hash(HashMode::Compat)),
        ("wide fast", wide()),
        (
            "small compat",
            Params {
                hll_p: 10,
                cm_rows: 4,
                cm_p: 11,
                agms_rows: 5,
                agms_p: 12,
                ..Params::with_hash(HashMode::Compat)
            },
        ),
    ]
}

/// One input of the level tests, fed the same way at every level.
enum Input {
    U32(Vec<u8>),
    U64(Vec<u64>),
    Values(Vec<String>),
}

impl Input {
    fn kind(&self) -> ItemKind {
        match self {
            Input::U32(_) => ItemKind::U32,
            Input::U64(_) => ItemKind::U64,
            Input::Values(_) => ItemKind::Bytes,
        }
    }

    /// A sketch of the input with `params`, made by the kernel compiled for `level`.
    fn sketch_at(&self, params: Params, level: Level) -> Sketch {
        let mut sketch = Sketch::new(params, self.kind()).unwrap();
        sketch.set_kernel_level(Some(level));
        match self {
            Input::U32(bytes) => sketch.update_u32_le(bytes),
            Input::U64(items) => sketch.update_u64(items),
            Input::Values(values) => sketch.update_values(values.iter().map(|v| v.as_bytes())),
        }
        .unwrap();
        sketch
    }
}

/// At every level the CPU supports (up to the `INPATH_ISA` cap), for every layout of
/// [`level_layouts`]: the full sketch equals the portable level's exactly, and so does every
/// choice of kept sketches (HyperLogLog alone takes its own loop) in the parts it keeps.
fn assert_every_level_equals_portable(input: &Input) {
    for (name, params) in level_layouts() {
        let portable = input.sketch_at(params, Level::Portable);
        for level in supported_levels() {
            let context = format!("{:?} items, {name} layout, at {level}", input.kind());
            if level != Level::Portable {
                let full = input.sketch_at(params, level);
                assert!(full.same_state(&portable), "{context}: all three");
            }
            for parts in choices() {
                let partial = input.sketch_at(params.with_parts(parts), level);
                assert_kept_parts_equal(&portable, &partial, parts, &context);
            }
        }
    }
}

// 100,003 items cross the hot counter tier's fold three times and end in a short batch.

#[test]
fn every_kernel_level_gives_the_same_partial_state_of_u32_items() {
    let bytes = le_bytes(&u32_items(5, 100_003, u32::MAX));
    assert_every_level_equals_portable(&Input::U32(bytes));
}

#[test]
fn every_kernel_level_gives_the_same_partial_state_of_u64_items() {
    let mut rng = common::rng(6);
    let items = (0..100_003)
        .map(|i| match i % 4 {
            0 => rng.gen_range(0..1000u64), // repeats
            _ => rng.gen::<u64>(),
        })
        .collect();
    assert_every_level_equals_portable(&Input::U64(items));
}

#[test]
fn every_kernel_level_gives_the_same_partial_state_of_byte_values() {
    let mut rng = common::rng(7);
    let values = (0..100_003)
        .map(|i| match i % 3 {
            0 => format!("{:.2}", rng.gen_range(-1e6..1e6f64)), // numeric: min/max kept
            1 => format!("user{}", rng.gen_range(0..20_000u32)),
            _ => format!("a longer value #{}", rng.gen::<u64>()),
        })
        .collect();
    assert_every_level_equals_portable(&Input::Values(values));
}

#[test]
fn partial_sketches_round_trip_merge_and_keep_their_lanes_exact() {
    let items = u32_items(9, 200_000, 50_000);
    let bytes = le_bytes(&items);
    for parts in choices() {
        let params = Params::default().with_parts(parts);
        let mut one = Sketch::new(params, ItemKind::U32).unwrap();
        one.update_u32_le(&bytes).unwrap();
        // File round trip: version 1 only when all three are kept.
        let file = format::to_bytes(&one);
        let version = u16::from_le_bytes([file[8], file[9]]);
        assert_eq!(version, if parts == Parts::ALL { 1 } else { 2 });
        let back = format::from_bytes(&file, "test").unwrap();
        assert!(back.same_state(&one));
        assert_eq!(back.params().parts(), parts);
        // Lanes and merge.
        let mut engine = SketchEngine::u32(params).unwrap();
        run_slice(&mut engine, &bytes, 3).unwrap();
        let laned = engine.into_sketch().unwrap();
        assert!(laned.same_state(&one), "{parts}");
        let (a, b) = bytes.split_at(4 * 70_001);
        let mut left = Sketch::new(params, ItemKind::U32).unwrap();
        left.update_u32_le(a).unwrap();
        let mut right = Sketch::new(params, ItemKind::U32).unwrap();
        right.update_u32_le(b).unwrap();
        left.merge(&right).unwrap();
        assert!(left.same_state(&one));
        // A sketch keeping other parts does not merge.
        if parts != Parts::ALL {
            let full = Sketch::new(Params::default(), ItemKind::U32).unwrap();
            assert!(left.merge(&full).is_err());
        }
    }
}

#[test]
fn a_version_1_file_must_keep_all_three() {
    let mut sketch = Sketch::new(Params::default().with_parts(Parts::HLL), ItemKind::U32).unwrap();
    sketch.update_u32(&[1, 2, 3]).unwrap();
    let mut file = format::to_bytes(&sketch);
    file[8] = 1; // claim version 1
    let body = file.len() - 4;
    let crc = crc32fast::hash(&file[..body]);
    file[body..].copy_from_slice(&crc.to_le_bytes());
    let err = format::from_bytes(&file, "test").unwrap_err().to_string();
    assert!(err.contains("must keep all three"), "{err}");
}

#[test]
fn sketch_lists_parse_and_bad_ones_name_the_valid_names() {
    assert_eq!(Parts::parse("all").unwrap(), Parts::ALL);
    assert_eq!(Parts::parse("hll").unwrap(), Parts::HLL);
    assert_eq!(Parts::parse("HLL+agms").unwrap().names(), "hll,agms");
    assert_eq!(Parts::parse("count-min, f2").unwrap().names(), "cm,agms");
    for bad in ["", "hll,bogus", "none"] {
        let err = Parts::parse(bad).unwrap_err().to_string();
        assert!(err.contains("hll, cm, agms"), "{bad:?}: {err}");
    }
}
