//! Flash faults: a write error in the middle of a chunk, a flash that is full from the start,
//! failing reads, a flash file that vanishes while serving. The server keeps serving from DRAM,
//! counts the errors in `stats`, never serves a wrong value, and a restart recovers what was
//! durable.

use crate::common::*;
use inpath_cache::{FlashFaults, Server};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn faulty(dir: &std::path::Path, faults: &Arc<FlashFaults>) -> Server {
    let mut cfg = config(dir, 12);
    cfg.store.faults = Some(faults.clone());
    Server::start(cfg).expect("server starts")
}

/// Sets keys `key0..keyN` (1000-byte self-checking values, version `v`), pipelined.
fn fill(c: &mut Conn, n: usize, v: u64) {
    set_all(c, n, v, 1000);
}

/// Every key is a miss or its right value; returns the hits per key.
fn read_all(c: &mut Conn, n: usize, v: u64) -> Vec<bool> {
    (0..n)
        .map(|k| {
            let key = format!("key{k}");
            match c.get(&key) {
                Some(got) => {
                    assert_eq!(check(&key, &got), Some(v), "wrong value for {key}");
                    true
                }
                None => false,
            }
        })
        .collect()
}

fn wait_for(c: &mut Conn, stat: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = c.stat(stat);
        if n > 0 {
            return n;
        }
        assert!(Instant::now() < deadline, "{stat} stayed 0");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes fail from the middle of the fourth chunk on (no space left): the server keeps
/// answering, what is in DRAM is served, the rest is a miss, never a wrong value; after a
/// restart (the device healed) the keys whose records reached the file before the fault are
/// back.
#[test]
fn a_write_error_in_the_middle_of_a_chunk_loses_only_what_was_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FlashFaults::default());
    // A chunk is a little over 1 MiB: 3.5 MiB of log is written whole, then nothing.
    faults.fail_writes_after(3 * (1 << 20) + (1 << 19));
    let server = faulty(dir.path(), &faults);
    let mut c = Conn::new(&server);
    let n = 8000; // ~8 MiB: twice the DRAM for values, more than the healthy part of the log
    fill(&mut c, n, 1);
    let errors = wait_for(&mut c, "flash_write_errors");
    assert!(errors > 0);
    let hits = read_all(&mut c, n, 1);
    let recent = hits[n - 1000..].iter().filter(|&&h| h).count();
    assert!(
        recent >= 900,
        "the newest values (in DRAM) are served: {recent}/1000"
    );
    // Still taking writes and serving them.
    assert_eq!(c.set("after", b"fault"), "STORED");
    assert_eq!(c.get("after").as_deref(), Some(&b"fault"[..]));
    drop(c);
    let _ = server.stop();

    faults.heal();
    let server = faulty(dir.path(), &faults);
    let mut c = Conn::new(&server);
    let hits = read_all(&mut c, n, 1);
    // The first ~3000 keys' records (3 MiB of log) were durable before the fault.
    let early = hits[..2500].iter().filter(|&&h| h).count();
    assert!(early >= 2000, "durable records recovered: {early}/2500");
    server.stop().unwrap();
}

/// A flash that is full from the first write: the cache runs from DRAM, reports the errors,
/// and a restart serves nothing wrong.
#[test]
fn a_full_flash_keeps_serving_from_dram() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FlashFaults::default());
    let server = faulty(dir.path(), &faults);
    faults.fail_writes_after(0);
    let mut c = Conn::new(&server);
    fill(&mut c, 1000, 7);
    wait_for(&mut c, "flash_write_errors");
    let hits = read_all(&mut c, 1000, 7);
    assert!(
        hits.iter().all(|&h| h),
        "1 MiB fits in DRAM: every key served"
    );
    // More than DRAM holds: values pushed out to the failing flash become misses.
    fill(&mut c, 8000, 8);
    let hits = read_all(&mut c, 8000, 8);
    assert!(hits.iter().filter(|&&h| h).count() >= 2000);
    drop(c);
    let _ = server.stop();
    faults.heal();
    let server = faulty(dir.path(), &faults);
    let mut c = Conn::new(&server);
    read_all(&mut c, 8000, 8);
    server.stop().unwrap();
}

/// Failing reads are misses (counted), never wrong values; the server keeps serving.
#[test]
fn failing_flash_reads_are_misses() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FlashFaults::default());
    let server = faulty(dir.path(), &faults);
    let mut c = Conn::new(&server);
    fill(&mut c, 8000, 3);
    faults.fail_reads.store(true, Relaxed);
    let hits = read_all(&mut c, 8000, 3);
    assert!(c.stat("flash_read_errors") > 0);
    assert!(hits.iter().any(|&h| h) && !hits.iter().all(|&h| h));
    faults.heal();
    assert_eq!(c.set("k", b"v"), "STORED");
    assert_eq!(c.get("k").as_deref(), Some(&b"v"[..]));
    server.stop().unwrap();
}

/// The flash file and its checkpoint are deleted while the server runs: it keeps serving (the
/// open file lives on), stops cleanly, and a restart on the missing file starts empty or
/// serves only right values.
#[test]
fn a_vanished_flash_file_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    fill(&mut c, 6000, 5);
    std::fs::remove_file(dir.path().join("cache.flash")).unwrap();
    let _ = std::fs::remove_file(dir.path().join("cache.flash.ckpt"));
    fill(&mut c, 6000, 6);
    read_all(&mut c, 6000, 6);
    drop(c);
    server.stop().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    read_all(&mut c, 6000, 6);
    assert_eq!(c.set("k", b"v"), "STORED");
    assert_eq!(c.get("k").as_deref(), Some(&b"v"[..]));
    server.stop().unwrap();
}

/// The fault tests above at a size set by `INPATH_CACHE_FAULT_ITEMS` (a benchmark-sized run by
/// hand, not in the gate: `INPATH_CACHE_FAULT_ITEMS=2000000 cargo test --release -p
/// inpath-cache --test cache faults::at_scale -- --ignored --nocapture`): that many 1000-byte
/// values into 256 MiB of DRAM and a flash file of 1.25 KiB per item; then every read failing
/// (a sample of keys: misses or right values, DRAM still serving), then a full flash while
/// another tenth of the keys is written (served from DRAM or missed, never wrong).
#[test]
#[ignore = "sized by INPATH_CACHE_FAULT_ITEMS; run by hand"]
fn at_scale() {
    static SAMPLES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n: usize = std::env::var("INPATH_CACHE_FAULT_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let dir =
        tempfile::tempdir_in(std::env::var("INPATH_CACHE_FAULT_DIR").unwrap_or("/tmp".into()))
            .unwrap();
    let faults = Arc::new(FlashFaults::default());
    let mut cfg = config(dir.path(), (n as u64 * 1280) >> 20);
    cfg.store.memory = 256 << 20;
    cfg.store.faults = Some(faults.clone());
    let server = Server::start(cfg).expect("server starts");
    let mut c = Conn::new(&server);
    let t = Instant::now();
    fill(&mut c, n, 1);
    let held = c.stat("curr_items");
    eprintln!(
        "at scale: {n} items set in {:.0?}, {held} held",
        t.elapsed()
    );
    // Each sample reads other keys (an offset into the stride): a key read before is in DRAM.
    let sample = |c: &mut Conn, v: u64, from: usize, to: usize| -> (usize, usize) {
        let (mut hits, mut gets) = (0, 0);
        let stride = ((to - from) / 20_000).max(1);
        let offset = SAMPLES.fetch_add(1, Relaxed) % stride;
        for k in (from + offset..to).step_by(stride) {
            let key = format!("key{k}");
            gets += 1;
            if let Some(got) = c.get(&key) {
                assert_eq!(check(&key, &got), Some(v), "wrong value for {key}");
                hits += 1;
            }
        }
        (hits, gets)
    };
    let (h, g) = sample(&mut c, 1, 0, n);
    eprintln!("at scale: healthy flash: {h} of {g} sampled gets hit");
    faults.fail_reads.store(true, Relaxed);
    let (h, g) = sample(&mut c, 1, 0, n);
    let errors = c.stat("flash_read_errors");
    eprintln!("at scale: failing reads: {h} of {g} hit (from DRAM), {errors} read errors");
    assert!(errors > 0 && h > 0);
    faults.heal();
    faults.fail_writes_after(0);
    let more = n / 10;
    let mut req = Vec::new();
    for k in 0..more {
        let key = format!("key{k}");
        let v = value(&key, 2, 1000);
        req.extend_from_slice(format!("set {key} 0 0 {} noreply\r\n", v.len()).as_bytes());
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        if req.len() > 256 << 10 {
            c.send(&req);
            req.clear();
        }
    }
    req.extend_from_slice(b"mn\r\n");
    c.send(&req);
    assert_eq!(c.line(), "MN");
    wait_for(&mut c, "flash_write_errors");
    let (h, g) = sample(&mut c, 2, 0, more);
    eprintln!(
        "at scale: full flash: {h} of {g} sampled new values hit (DRAM), {} write errors",
        c.stat("flash_write_errors")
    );
    assert!(h > 0);
    faults.heal();
    server.stop().unwrap();
}
