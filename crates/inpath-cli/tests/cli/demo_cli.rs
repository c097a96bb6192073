//! `inpath demo`, the product's front door: every section runs, and the sections that check
//! themselves against an independent answer say "equal".

use std::process::Command;

#[test]
fn demo_runs_every_section_and_its_checks_agree() {
    let out = Command::new(env!("CARGO_BIN_EXE_inpath"))
        .args(["demo", "--items", "1000000"])
        .output()
        .expect("run inpath demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for section in [
        "== sketch",
        "== corr",
        "== seal",
        "== wire",
        "== cache",
        "== query",
        "== store",
    ] {
        assert!(text.contains(section), "no {section} section in:\n{text}");
    }
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
            .to_string()
    };
    // TPC-H through SQL on sealed pages against DuckDB's pinned answers.
    for q in [
        "Q1 from the sealed pages",
        "Q6 from the sealed pages",
        "Q14 from the sealed pages",
    ] {
        let l = line(q);
        assert!(l.ends_with(": equal"), "{l}");
    }
    let all = line("all 22 TPC-H queries on the sealed pages");
    assert!(all.contains(": 22 of 22 equal"), "{all}");
    // Q1 offloaded to the device: DuckDB's answer, and only the groups cross to the host.
    let offload = line("offload (AQUOMAN Table Tasks beside the pages)");
    assert!(
        offload.contains("against DuckDB's answer: equal"),
        "{offload}"
    );
    assert!(
        offload.contains("all 22 with offload: 22 of 22 equal"),
        "{offload}"
    );
    // The classification the planner gives at SF 0.01: most queries run whole on the device.
    let full: usize = offload
        .split(", ")
        .find_map(|p| p.strip_suffix(" queries fully offloaded (joins included)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(full >= 12, "{offload}");
    // Q10's top 20: the device merged its groups into customers and kept all but those.
    let topk = line("TOPK on the device");
    let kept: u64 = topk
        .split("; ")
        .nth(1)
        .and_then(|p| p.split(' ').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or(0);
    assert!(kept > 100, "{topk}");
    // The in-store search against a plain scan of the original text.
    let grep = line("\"furiously\" searched in the store");
    assert!(grep.ends_with(": equal"), "{grep}");
    // The DataSketches image reads back to the same registers.
    let ds = line("for Spark and DataSketches");
    assert!(ds.ends_with("read back equal"), "{ds}");
    // The in-store taps against the sketch and CRC of the original text.
    let taps = line("in-store taps on 2 lanes");
    assert!(
        taps.contains("on 1 lane: equal)") && taps.contains("(equal to the original's)"),
        "{taps}"
    );
}
