//! The taps' own suite: specifications parsed and refused, results of one job, merges.

use inpath_taps::{parse_tap, Direction, JobId};
use serde_json::json;

fn err(spec: &str) -> String {
    match parse_tap(spec) {
        Ok(_) => panic!("{spec} should be refused"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn parses_sketch_choice() {
    let tap = parse_tap("sketch:format=u32,sketches=hll").unwrap();
    assert_eq!(
        tap.describe(),
        "sketch:format=u32,hll_p=16,sketches=hll,hash=fast,seed=0x0"
    );
    // What describe() prints parses back to the same tap.
    let again = parse_tap(&tap.describe()).unwrap();
    assert_eq!(again.describe(), tap.describe());
    let tap = parse_tap("sketch:format=u32,sketches=cm+agms,cm=4x12").unwrap();
    assert_eq!(
        tap.describe(),
        "sketch:format=u32,cm=4x12,agms=6x13,sketches=cm+agms,hash=fast,seed=0x0"
    );
}

#[test]
fn parses_sketch_options() {
    let tap = parse_tap("sketch:format=u32,cm=4x12,agms=5x10,hll_p=14,seed=0x10").unwrap();
    assert_eq!(
        tap.describe(),
        "sketch:format=u32,hll_p=14,cm=4x12,agms=5x10,hash=fast,seed=0x10"
    );
    let e = err("sketch:column=user,delimiter=tab,no_header");
    assert!(e.contains("index"), "{e}");
    let tap = parse_tap("sketch:column=2,delimiter=tab,no_header").unwrap();
    assert!(tap.describe().contains("csv,column=2"));
    assert_eq!(
        parse_tap("sketch").unwrap().describe().split(',').next(),
        Some("sketch:format=lines")
    );
    assert_eq!(parse_tap("crc").unwrap().name(), "crc");
}

#[test]
fn refuses_bad_specs() {
    assert!(err("sketchy").contains("unknown tap \"sketchy\""));
    assert!(err("sketch:fmt=u32").contains("unknown option \"fmt\""));
    assert!(err("sketch:format=u16").contains("use u32, u64, lines or csv"));
    assert!(err("sketch:hll_p=30").contains("hll_p = 30 is out of range"));
    assert!(err("sketch:cm=6").contains("not ROWSxP"));
    assert!(err("sketch:format=u32,format=u64").contains("twice"));
    assert!(err("sketch:format=csv").contains("needs column"));
    assert!(err("sketch:sketches=hll+xyz").contains("joined with +"));
    assert!(err("sketch:format=u32,column=a").contains("only applies"));
    assert!(err("sketch:save=/nonexistent/dir").contains("not an existing directory"));
    assert!(err("sketch:hash=md5").contains("fast"));
    assert!(err("crc:x=1").contains("takes no options"));
    assert!(err("sketch:format").contains("needs a value"));
}

#[test]
fn sketch_tap_reports_leftover_and_keeps_whole_records() {
    let factory = parse_tap("sketch:format=u32").unwrap();
    let mut tap = factory.make().unwrap();
    let bytes: Vec<u8> = (0u32..1000).flat_map(|v| v.to_le_bytes()).collect();
    tap.update(&bytes[..1001]).unwrap();
    tap.update(&bytes[1001..]).unwrap();
    tap.update(&[1, 2, 3]).unwrap();
    let job = JobId {
        conn: 1,
        direction: Direction::C2s,
        job: 0,
    };
    let out = tap.finish(job, None);
    assert_eq!(out.json["records"], 1000);
    assert_eq!(out.json["leftover_bytes"], 3);
    assert_eq!(out.json["max"], 999);
    // Reset: the next job starts empty.
    let out = tap.finish(job, None);
    assert_eq!(out.json["records"], 0);
    assert_eq!(out.json["leftover_bytes"], 0);
}

#[test]
fn lines_tap_reports_unterminated_line() {
    let mut tap = parse_tap("sketch").unwrap().make().unwrap();
    tap.update(b"a\nbb\nccc").unwrap();
    let job = JobId {
        conn: 1,
        direction: Direction::C2s,
        job: 0,
    };
    let out = tap.finish(job, None);
    assert_eq!(out.json["records"], 3);
    assert_eq!(out.json["unterminated_line_bytes"], 3);
}

#[test]
fn partials_merge() {
    let factory = parse_tap("crc").unwrap();
    let mut a = factory.make().unwrap();
    a.update(b"hello").unwrap();
    let job = JobId {
        conn: 1,
        direction: Direction::C2s,
        job: 0,
    };
    let mut merged = a.finish(job, None).partial;
    assert_eq!(merged.to_json()["crc32"], crc32fast::hash(b"hello"));
    a.update(b"abc").unwrap();
    merged
        .merge_from(a.finish(job, None).partial.as_ref())
        .unwrap();
    assert_eq!(merged.to_json(), json!({"bytes": 8, "jobs": 2}));
    let sketch = parse_tap("sketch").unwrap().make().unwrap().snapshot();
    assert!(merged.merge_from(sketch.as_ref()).is_err());
}

/// Any chunking of a job's bytes gives the same result, and a whole-input run on any lane count
/// gives the same result as the tap fed on a connection (sketch, corr and crc).
#[test]
fn chunking_and_lanes_never_change_a_result() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let rows: Vec<u8> = (0..20_000u32)
        .flat_map(|_| ((next() % 1000) as u32).to_le_bytes())
        .collect();
    let job = JobId {
        conn: 1,
        direction: Direction::C2s,
        job: 0,
    };
    for spec in ["sketch:format=u32", "corr:type=u32,streams=4", "crc"] {
        let factory = parse_tap(spec).unwrap();
        let mut whole = factory.make().unwrap();
        whole.update(&rows).unwrap();
        let want = whole.finish(job, None).json;
        for round in 0..5 {
            let mut tap = factory.make().unwrap();
            let mut at = 0;
            while at < rows.len() {
                let n = ((next() % 5000) as usize + 1).min(rows.len() - at);
                tap.update(&rows[at..at + n]).unwrap();
                at += n;
            }
            assert_eq!(
                tap.finish(job, None).json,
                want,
                "{spec}, chunking round {round}"
            );
        }
        if spec != "crc" {
            for threads in 1..=4 {
                let got = factory.run_input(&mut &rows[..], threads).unwrap();
                let keys = [
                    "records",
                    "count",
                    "cardinality",
                    "f2",
                    "min",
                    "max",
                    "rows",
                    "pearson",
                    "means",
                ];
                let present: Vec<&str> =
                    keys.into_iter().filter(|k| want.get(k).is_some()).collect();
                assert!(present.len() >= 3, "{spec}: {want}");
                for key in present {
                    assert_eq!(
                        got.get(key),
                        want.get(key),
                        "{spec}, {threads} lanes, {key}"
                    );
                }
            }
        }
    }
}
