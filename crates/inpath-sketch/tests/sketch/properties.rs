//! Merge equals union; any chunking and any lane count (at every kernel level) give identical
//! state; counters stay exact across tier folds.

use crate::common::{self, le_bytes, u32_items, Model};
use inpath_core::{run_reader, run_slice, ColumnRef, Engine, Lane, LaneOptions};
use inpath_sketch::arch::{supported_levels, Level};
use inpath_sketch::{Estimator, Extremes, HashMode, ItemKind, Params, Sketch, SketchEngine};
use rand::Rng;

#[test]
fn merge_equals_union() {
    for hash in [HashMode::Fast, HashMode::Compat] {
        let p = Params::with_hash(hash);
        let a = u32_items(1, 50_000, 20_000);
        let b = u32_items(2, 70_000, 40_000);
        let mut sa = Sketch::new(p, ItemKind::U32).unwrap();
        sa.update_u32(&a).unwrap();
        let mut sb = Sketch::new(p, ItemKind::U32).unwrap();
        sb.update_u32(&b).unwrap();
        let mut union = Sketch::new(p, ItemKind::U32).unwrap();
        union.update_u32(&a).unwrap();
        union.update_u32(&b).unwrap();
        let mut merged = sa.clone();
        merged.merge(&sb).unwrap();
        assert!(merged.same_state(&union), "{hash:?}: a+b");
        let mut other_order = sb.clone();
        other_order.merge(&sa).unwrap();
        assert!(other_order.same_state(&union), "{hash:?}: b+a");
        assert_eq!(merged.extremes(), union.extremes());
    }
}

#[test]
fn update_on_lanes_equals_one_pass() {
    use inpath_sketch::LANE_MIN_ITEMS;
    let on_lanes = SketchEngine::update_on_lanes;
    // Enough items for five lanes; a first update so the lanes merge into existing state.
    let items = u32_items(21, 5 * LANE_MIN_ITEMS + 777, 300_000);
    let bytes = le_bytes(&items);
    let (head, tail) = bytes.split_at(4000);
    let mut one = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    one.update_u32_le(head).unwrap();
    one.update_u32_le(tail).unwrap();
    for lanes in [1, 2, 3, 5, 64] {
        let mut s = Sketch::new(Params::default(), ItemKind::U32).unwrap();
        on_lanes(&mut s, head, lanes).unwrap();
        on_lanes(&mut s, tail, lanes).unwrap();
        assert!(s.same_state(&one), "{lanes} lanes");
        assert_eq!(s.count(), items.len() as u64);
    }
    let wide: Vec<u8> = items
        .iter()
        .flat_map(|&v| (v as u64 * 7919).to_le_bytes())
        .collect();
    let mut one = Sketch::new(Params::default(), ItemKind::U64).unwrap();
    one.update_u64_le(&wide).unwrap();
    let mut s = Sketch::new(Params::default(), ItemKind::U64).unwrap();
    on_lanes(&mut s, &wide, 4).unwrap();
    assert!(s.same_state(&one));
    // A partial item, or a sketch of byte values, is refused by name and the sketch keeps
    // what it held.
    let err = on_lanes(&mut s, &wide[..wide.len() - 3], 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("whole 8-byte items"), "{err}");
    assert!(s.same_state(&one));
    let mut text = Sketch::new(Params::default(), ItemKind::Bytes).unwrap();
    let err = on_lanes(&mut text, &bytes, 2).unwrap_err().to_string();
    assert!(err.contains("a u32 or u64 sketch"), "{err}");
    assert_eq!(text.count(), 0);
}

#[test]
fn merge_refuses_different_settings() {
    let a = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    for (p, kind) in [
        (
            Params {
                hll_p: 14,
                ..Params::default()
            },
            ItemKind::U32,
        ),
        (
            Params {
                cm_rows: 5,
                ..Params::default()
            },
            ItemKind::U32,
        ),
        (
            Params {
                agms_p: 12,
                ..Params::default()
            },
            ItemKind::U32,
        ),
        (
            Params {
                seed: 1,
                ..Params::default()
            },
            ItemKind::U32,
        ),
        (Params::with_hash(HashMode::Compat), ItemKind::U32),
        (Params::default(), ItemKind::U64),
    ] {
        let mut b = Sketch::new(p, kind).unwrap();
        let err = b.merge(&a).unwrap_err().to_string();
        assert!(err.contains("different settings"), "{err}");
    }
}

#[test]
fn any_chunking_and_lane_count_give_identical_state() {
    let items = u32_items(3, 200_000, 1 << 30);
    let bytes = le_bytes(&items);
    let p = Params::default();
    let mut one_shot = SketchEngine::u32(p).unwrap();
    one_shot.update(&bytes).unwrap();
    let expected = one_shot.finish().unwrap();
    let mut rng = common::rng(9);
    for trial in 0..20 {
        let mut engine = SketchEngine::u32(p).unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let step = if trial == 0 {
                1
            } else {
                rng.gen_range(0..20_000)
            };
            let end = (at + step).min(bytes.len());
            engine.update(&bytes[at..end]).unwrap();
            at = end;
            if trial == 0 && at > 4000 {
                engine.update(&bytes[at..]).unwrap();
                at = bytes.len();
            }
        }
        assert!(
            engine.finish().unwrap().same_state(&expected),
            "chunking trial {trial}"
        );
    }
    for threads in 1..=6 {
        let mut engine = SketchEngine::u32(p).unwrap();
        run_slice(&mut engine, &bytes, threads).unwrap();
        assert!(
            engine.finish().unwrap().same_state(&expected),
            "run_slice {threads}"
        );
        let mut engine = SketchEngine::u32(p).unwrap();
        let options = LaneOptions {
            threads,
            chunk_size: 64 * 1024,
        };
        run_reader(
            &mut engine,
            &mut &bytes[..],
            "mem".as_ref(),
            options,
            &mut |_| {},
        )
        .unwrap();
        assert!(
            engine.finish().unwrap().same_state(&expected),
            "run_reader {threads}"
        );
    }
}

#[test]
fn lines_and_csv_lanes_and_chunks_agree() {
    let mut rng = common::rng(4);
    let values: Vec<String> = (0..30_000)
        .map(|_| format!("user{}", rng.gen_range(0..5_000)))
        .collect();
    let text = values.join("\n");
    let p = Params::default();
    let mut model = Model::new(p);
    for v in &values {
        model.insert(v.as_bytes());
    }
    // Every kernel level, set on the engine: its forked lanes run at the same level.
    for level in supported_levels() {
        for threads in [1, 2, 4] {
            let mut engine = SketchEngine::lines(p).unwrap();
            engine.set_kernel_level(Some(level));
            let options = LaneOptions {
                threads,
                chunk_size: 8192,
            };
            run_reader(
                &mut engine,
                &mut text.as_bytes(),
                "mem".as_ref(),
                options,
                &mut |_| {},
            )
            .unwrap();
            model.assert_matches(
                &engine.finish().unwrap(),
                &format!("lines, {threads} lanes at {level}"),
            );
        }
    }
    let csv: String = std::iter::once("id,user,score".to_string())
        .chain(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{i},\"{v}\",{}", i % 7)),
        )
        .collect::<Vec<_>>()
        .join("\n");
    for level in supported_levels() {
        for column in [ColumnRef::Name("user".into()), ColumnRef::Index(1)] {
            let mut engine = SketchEngine::csv(p, column, b',', true).unwrap();
            engine.set_kernel_level(Some(level));
            for chunk in csv.as_bytes().chunks(777) {
                engine.update(chunk).unwrap();
            }
            model.assert_matches(&engine.finish().unwrap(), &format!("csv column at {level}"));
        }
    }
    // Numeric CSV values give a numeric min and max.
    let mut engine = SketchEngine::csv(p, ColumnRef::Name("score".into()), b',', true).unwrap();
    engine.update(csv.as_bytes()).unwrap();
    let sketch = engine.finish().unwrap();
    assert_eq!(
        sketch.extremes(),
        Extremes::Numeric {
            range: Some((0.0, 6.0)),
            numeric: 30_000
        }
    );
}

#[test]
fn counters_stay_exact_across_tier_folds() {
    // Heavy repetition drives single counters far past the 16-bit hot tier many times over.
    let p = Params::default();
    let items: Vec<u32> = (0..300_000u32)
        .map(|i| if i % 3 == 0 { 7 } else { i % 50 })
        .collect();
    let mut model = Model::new(p);
    for x in &items {
        model.insert(&x.to_le_bytes());
    }
    let mut sketch = Sketch::new(p, ItemKind::U32).unwrap();
    for chunk in items.chunks(10_007) {
        sketch.update_u32(chunk).unwrap();
    }
    model.assert_matches(&sketch, "after folds");
    let sevens = items.iter().filter(|&&x| x == 7).count() as u64;
    assert!(sketch.frequency("7").unwrap() >= sevens);
    // Merging sketches that each folded keeps totals exact.
    let mut a = Sketch::new(p, ItemKind::U32).unwrap();
    a.update_u32(&items[..150_000]).unwrap();
    let mut b = Sketch::new(p, ItemKind::U32).unwrap();
    b.update_u32(&items[150_000..]).unwrap();
    a.merge(&b).unwrap();
    model.assert_matches(&a, "merged after folds");
}

#[test]
fn count_min_never_underestimates_and_min_max_are_exact() {
    let items = u32_items(8, 100_000, 30_000);
    let mut sketch = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    sketch.update_u32(&items).unwrap();
    let mut truth = std::collections::HashMap::new();
    for x in &items {
        *truth.entry(*x).or_insert(0u64) += 1;
    }
    for (x, f) in &truth {
        assert!(sketch.frequency(&x.to_string()).unwrap() >= *f);
    }
    let (min, max) = (
        *items.iter().min().unwrap() as u64,
        *items.iter().max().unwrap() as u64,
    );
    assert_eq!(sketch.extremes(), Extremes::Int(Some((min, max))));
    assert_eq!(sketch.count(), 100_000);
}

#[test]
fn empty_sketch_is_all_zero() {
    let sketch = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    let s = sketch.summary(Estimator::Ertl);
    assert_eq!((s.count, s.cardinality, s.f2), (0, Some(0.0), Some(0.0)));
    assert_eq!(sketch.cardinality(Estimator::Reference), Some(0.0));
    assert_eq!(sketch.extremes(), Extremes::Int(None));
    assert_eq!(sketch.frequency("5").unwrap(), 0);
}

#[test]
fn keys_are_checked() {
    let sketch = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    assert!(sketch.frequency("0x10").is_ok());
    for bad in ["-1", "4294967296", "abc", ""] {
        assert!(sketch.frequency(bad).is_err(), "{bad}");
    }
}

#[test]
fn engine_merge_refuses_a_lane_holding_a_partial_record() {
    let mut a = SketchEngine::u32(Params::default()).unwrap();
    let mut b = a.fork();
    b.update(&[1, 2]).unwrap();
    assert!(a.merge(&b).is_err());
}

#[test]
fn a_kernel_level_is_kept_by_clone_clear_fork_and_finish_but_is_not_state() {
    let level = Some(Level::Portable);
    let mut sketch = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    assert_eq!(sketch.kernel_level(), None);
    sketch.set_kernel_level(level);
    sketch.update_u32(&[1, 2, 3]).unwrap();
    assert_eq!(sketch.clone().kernel_level(), level);
    let mut best = Sketch::new(Params::default(), ItemKind::U32).unwrap();
    best.update_u32(&[1, 2, 3]).unwrap();
    assert!(
        sketch.same_state(&best),
        "the level is not part of the state"
    );
    sketch.clear();
    assert_eq!(sketch.kernel_level(), level);
    sketch.set_kernel_level(None);
    assert_eq!(sketch.kernel_level(), None);

    let mut engine = SketchEngine::u32(Params::default()).unwrap();
    engine.set_kernel_level(level);
    assert_eq!(engine.fork().sketch().kernel_level(), level);
    engine.update(&[1, 0, 0, 0]).unwrap();
    assert_eq!(engine.finish().unwrap().kernel_level(), level);
    assert_eq!(engine.sketch().kernel_level(), level, "after finish");
}
