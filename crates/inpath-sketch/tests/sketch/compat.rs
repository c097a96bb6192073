//! The engine equals the simple model, register for register and counter for counter, in
//! compat mode (the SKT reference rules) and in fast mode, for u32 and u64 items and byte
//! values, through every kernel level the CPU supports (each set in process with
//! `Sketch::set_kernel_level`), for the default and other parameter sets.

use crate::common::{self, le_bytes, u32_items, Model};
use inpath_core::{Engine, Lane};
use inpath_sketch::arch::supported_levels;
use inpath_sketch::{HashMode, ItemKind, Params, Sketch, SketchEngine};

fn params(hash: HashMode, hll_p: u8, cm: (u8, u8), agms: (u8, u8), seed: u64) -> Params {
    Params {
        hll_p,
        cm_rows: cm.0,
        cm_p: cm.1,
        agms_rows: agms.0,
        agms_p: agms.1,
        hash,
        seed,
    }
}

fn parameter_sets() -> Vec<Params> {
    vec![
        Params::with_hash(HashMode::Compat),
        params(HashMode::Compat, 4, (1, 4), (1, 4), 42),
        params(HashMode::Compat, 18, (9, 14), (8, 15), 0xDEADF00D),
        params(HashMode::Compat, 12, (6, 20), (6, 20), 7),
        Params::with_hash(HashMode::Fast),
        params(HashMode::Fast, 14, (16, 16), (16, 17), 99), // 256+ hash bits: extension blocks
        params(HashMode::Fast, 16, (10, 13), (9, 13), 1),
    ]
}

#[test]
fn u32_items_match_the_model_in_every_kernel() {
    let items = u32_items(11, 30_000, 5_000);
    let bytes = le_bytes(&items);
    for p in parameter_sets() {
        let mut model = Model::new(p);
        for x in &items {
            model.insert(&x.to_le_bytes());
        }
        for level in supported_levels() {
            let mut sketch = Sketch::new(p, ItemKind::U32).unwrap();
            sketch.set_kernel_level(Some(level));
            sketch.update_u32_le(&bytes).unwrap();
            model.assert_matches(&sketch, &format!("{p:?} at {level:?}"));
            // The engine, chunked oddly, with its level set.
            let mut engine = SketchEngine::u32(p).unwrap();
            engine.set_kernel_level(Some(level));
            for chunk in bytes.chunks(4093) {
                engine.update(chunk).unwrap();
            }
            let context = format!("{p:?} via engine at {level:?}");
            model.assert_matches(&engine.finish().unwrap(), &context);
        }
        // The default path (the process-wide level) agrees too.
        let mut engine = SketchEngine::u32(p).unwrap();
        for chunk in bytes.chunks(4093) {
            engine.update(chunk).unwrap();
        }
        model.assert_matches(&engine.finish().unwrap(), &format!("{p:?} via engine"));
    }
}

#[test]
fn u64_items_match_the_model_in_every_kernel() {
    // 40,000 items cross the hot counter tier's fold once.
    let mut rng = common::rng(5);
    let items: Vec<u64> = (0..40_000)
        .map(|i| match i % 2 {
            0 => rand::Rng::gen::<u64>(&mut rng) % 3_000,
            _ => rand::Rng::gen::<u64>(&mut rng),
        })
        .collect();
    let bytes: Vec<u8> = items.iter().flat_map(|x| x.to_le_bytes()).collect();
    for p in parameter_sets() {
        let mut model = Model::new(p);
        for x in &items {
            model.insert(&x.to_le_bytes());
        }
        for level in supported_levels() {
            let mut sketch = Sketch::new(p, ItemKind::U64).unwrap();
            sketch.set_kernel_level(Some(level));
            sketch.update_u64(&items).unwrap();
            model.assert_matches(&sketch, &format!("u64 {p:?} at {level:?}"));
            let mut engine = SketchEngine::u64(p).unwrap();
            engine.set_kernel_level(Some(level));
            for chunk in bytes.chunks(8191) {
                engine.update(chunk).unwrap();
            }
            let context = format!("u64 {p:?} via engine at {level:?}");
            model.assert_matches(&engine.finish().unwrap(), &context);
        }
        let mut sketch = Sketch::new(p, ItemKind::U64).unwrap();
        sketch.update_u64(&items).unwrap();
        model.assert_matches(&sketch, &format!("u64 {p:?}"));
    }
}

#[test]
fn byte_values_match_the_model_in_every_kernel() {
    // Text values are hashed in batches outside the kernel, which takes the hashes.
    let words: Vec<String> = (0..40_000)
        .map(|i| format!("word-{}", (i * 7919) % 20_000))
        .collect();
    let text = words.join("\n");
    for p in parameter_sets() {
        let mut model = Model::new(p);
        for w in &words {
            model.insert(w.as_bytes());
        }
        for level in supported_levels() {
            let mut sketch = Sketch::new(p, ItemKind::Bytes).unwrap();
            sketch.set_kernel_level(Some(level));
            sketch
                .update_values(words.iter().map(|w| w.as_bytes()))
                .unwrap();
            model.assert_matches(&sketch, &format!("values {p:?} at {level:?}"));
            let mut engine = SketchEngine::lines(p).unwrap();
            engine.set_kernel_level(Some(level));
            engine.update(text.as_bytes()).unwrap();
            engine.close_input().unwrap();
            model.assert_matches(engine.sketch(), &format!("lines {p:?} at {level:?}"));
        }
        let mut engine = SketchEngine::lines(p).unwrap();
        engine.update(text.as_bytes()).unwrap();
        engine.close_input().unwrap();
        model.assert_matches(engine.sketch(), &format!("lines {p:?}"));
    }
}

#[test]
fn compat_rejects_more_than_128_hash_bits() {
    let too_wide = params(HashMode::Compat, 16, (10, 13), (6, 13), 1);
    let err = Sketch::new(too_wide, ItemKind::U32)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("130 hash bits") && err.contains("--hash fast"),
        "{err}"
    );
    let too_wide = params(HashMode::Compat, 16, (6, 13), (9, 14), 1); // 9 x 15 = 135 bits
    assert!(Sketch::new(too_wide, ItemKind::U32).is_err());
    let big_seed = params(HashMode::Compat, 16, (6, 13), (6, 13), 1 << 40);
    assert!(Sketch::new(big_seed, ItemKind::U32)
        .unwrap_err()
        .to_string()
        .contains("seed"));
}

#[test]
fn parameter_ranges_are_enforced() {
    let base = Params::default();
    for bad in [
        Params { hll_p: 3, ..base },
        Params { hll_p: 19, ..base },
        Params {
            cm_rows: 17,
            ..base
        },
        Params { cm_p: 3, ..base },
        Params { agms_p: 21, ..base },
        // Zero size means "not kept", but at least one sketch must be.
        Params {
            hll_p: 0,
            cm_rows: 0,
            agms_rows: 0,
            ..base
        },
    ] {
        let err = Sketch::new(bad, ItemKind::U32).unwrap_err();
        assert!(matches!(err, inpath_core::Error::Parameter { .. }), "{err}");
    }
    // A single zero turns that sketch off.
    for off in [
        Params { hll_p: 0, ..base },
        Params { cm_rows: 0, ..base },
        Params {
            agms_rows: 0,
            ..base
        },
    ] {
        Sketch::new(off, ItemKind::U32).unwrap();
    }
}
