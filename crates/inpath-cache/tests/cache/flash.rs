//! The flash tier: overflowing DRAM and flash never serves a wrong value; index misses touch no
//! flash and flash hits cost one read; restarts (clean, damaged checkpoint, damaged log) keep
//! what they can and never serve wrong data.

use crate::common::*;

/// Writes `keys` checksummed values of `size` bytes, `rounds` versions each.
fn fill(c: &mut Conn, keys: usize, rounds: u64, size: usize) {
    for round in 0..rounds {
        set_all(c, keys, round, size);
    }
}

#[test]
fn overflowing_dram_and_flash_never_serves_a_wrong_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    // 12 MiB of flash, ~4 MiB of DRAM values: 8000 keys x 1 KiB x 5 rounds is ~40 MiB
    // written, more than three times the flash and ten times the DRAM.
    fill(&mut c, 8000, 5, 1000);
    let s = c.stats();
    assert!(
        s["flash_chunks_reclaimed"].parse::<u64>().unwrap() >= 20,
        "{s:?}"
    );
    assert!(s["dram_evictions"].parse::<u64>().unwrap() > 10_000);
    // DRAM stays within its budget.
    let n = |k: &str| s[k].parse::<u64>().unwrap();
    assert!(n("bytes") <= n("dram_limit_bytes"), "{s:?}");
    assert!(n("bytes") + n("index_bytes") + 4 * n("flash_chunk_bytes") <= n("limit_maxbytes"));
    let (mut hits, mut misses) = (0, 0);
    for k in 0..8000 {
        let key = format!("key{k}");
        match c.get(&key) {
            Some(v) => {
                assert_eq!(check(&key, &v), Some(4), "wrong value for {key}");
                hits += 1;
            }
            None => misses += 1,
        }
    }
    // The last round (8 MiB) fits in the 12 MiB log: nearly everything is still there.
    assert!(hits > 7000, "hits {hits} misses {misses}");
    let s = c.stats();
    assert!(s["flash_hits"].parse::<u64>().unwrap() > 1000);
    assert_eq!(s["damaged_records"], "0");
    // Interleaved overwrites and deletes while values move between DRAM and flash.
    for k in (0..8000).step_by(3) {
        let key = format!("key{k}");
        assert_eq!(c.ask(&format!("delete {key}\r\n"), 1).len(), 1);
    }
    for k in 0..8000 {
        let key = format!("key{k}");
        let got = c.get(&key);
        if k % 3 == 0 {
            assert_eq!(got, None, "{key} was deleted");
        } else if let Some(v) = got {
            assert_eq!(check(&key, &v), Some(4));
        }
    }
    server.stop().unwrap();
}

#[test]
fn index_miss_reads_no_flash_and_a_flash_hit_reads_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    // ~4 MiB of DRAM holds ~3700 of these; the first keys are on flash only.
    fill(&mut c, 6000, 1, 1000);
    let before = c.stat("flash_reads");
    for k in 0..2000 {
        assert_eq!(c.get(&format!("never{k}")), None);
    }
    assert_eq!(
        c.stat("flash_reads"),
        before,
        "index misses must not read flash"
    );
    let mut flash_hits = 0;
    for k in 0..500 {
        let key = format!("key{k}");
        let (r0, h0) = (c.stat("flash_reads"), c.stat("flash_hits"));
        let v = c.get(&key).expect("still cached");
        assert_eq!(check(&key, &v), Some(0));
        let (r1, h1) = (c.stat("flash_reads"), c.stat("flash_hits"));
        assert!(r1 - r0 <= 1, "one get, {} flash reads", r1 - r0);
        assert_eq!(r1 - r0, h1 - h0, "a flash read is a flash hit");
        flash_hits += h1 - h0;
    }
    assert!(flash_hits > 400, "{flash_hits}");
    // DRAM per item for the index.
    let s = c.stats();
    let per: f64 = s["index_bytes_per_item"].parse().unwrap();
    assert!(per > 0.0);
    server.stop().unwrap();
}

#[test]
fn clean_restart_keeps_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    fill(&mut c, 3000, 2, 1000);
    c.ask("delete key7\r\n", 1);
    c.set("small", b"s");
    c.ask("flush_all\r\n", 1);
    c.set("after", b"flush");
    fill(&mut c, 2000, 1, 900);
    drop(c);
    server.stop().unwrap();

    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(c.get("small"), None, "flush_all survives the restart");
    assert_eq!(c.get("after").as_deref(), Some(&b"flush"[..]));
    for k in 0..2000 {
        let key = format!("key{k}");
        let v = c
            .get(&key)
            .unwrap_or_else(|| panic!("{key} lost in a clean restart"));
        assert_eq!(check(&key, &v), Some(0));
    }
    for k in 2000..3000 {
        assert_eq!(c.get(&format!("key{k}")), None, "flushed before");
    }
    let s = c.stats();
    assert!(s["recovered_items"].parse::<u64>().unwrap() >= 2001);
    server.stop().unwrap();
}

#[test]
fn damaged_checkpoint_falls_back_to_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    fill(&mut c, 3000, 1, 1000);
    drop(c);
    server.stop().unwrap();
    let ckpt = dir.path().join("cache.flash.ckpt");
    let mut data = std::fs::read(&ckpt).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xFF;
    std::fs::write(&ckpt, &data).unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    for k in 0..3000 {
        let key = format!("key{k}");
        let v = c.get(&key).unwrap_or_else(|| panic!("{key} lost"));
        assert_eq!(check(&key, &v), Some(0));
    }
    server.stop().unwrap();
}

#[test]
fn damaged_log_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    fill(&mut c, 3000, 1, 1000);
    drop(c);
    server.stop().unwrap();
    // Flip bytes all over the first two chunks (records of the first ~2000 keys).
    let path = dir.path().join("cache.flash");
    let mut data = std::fs::read(&path).unwrap();
    for off in (5000..2 * 1_060_000).step_by(7001) {
        data[off] ^= 0x5A;
    }
    std::fs::write(&path, &data).unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    let mut hits = 0;
    for k in 0..3000 {
        let key = format!("key{k}");
        if let Some(v) = c.get(&key) {
            assert_eq!(check(&key, &v), Some(0), "damaged value served for {key}");
            hits += 1;
        }
    }
    assert!(hits > 500, "the undamaged tail is still served ({hits})");
    assert!(c.stat("damaged_records") > 0);
    server.stop().unwrap();
}

/// A stand-in for the seal engine: XOR with a key byte stream plus a keyed checksum.
struct ToySeal(u8);

impl inpath_cache::store::RecordSeal for ToySeal {
    fn seal(&self, plain: &[u8]) -> Result<Vec<u8>, inpath_cache::store::SealError> {
        let mut out: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ self.0.wrapping_add(i as u8).wrapping_mul(31))
            .collect();
        out.extend_from_slice(&(fnv(plain) ^ self.0 as u64).to_le_bytes());
        Ok(out)
    }
    fn unseal(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        let (body, sum) = sealed.split_at(sealed.len().checked_sub(8)?);
        let plain: Vec<u8> = body
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ self.0.wrapping_add(i as u8).wrapping_mul(31))
            .collect();
        ((fnv(&plain) ^ self.0 as u64).to_le_bytes() == sum).then_some(plain)
    }
    fn describe(&self) -> String {
        "toy".into()
    }
}

fn sealed_server(dir: &std::path::Path, key: Option<u8>) -> inpath_cache::Server {
    let mut cfg = config(dir, 12);
    cfg.store.seal = key.map(|k| inpath_cache::store::SealHook(std::sync::Arc::new(ToySeal(k))));
    inpath_cache::Server::start(cfg).unwrap()
}

#[test]
fn sealed_flash_hides_keys_and_values_and_survives_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let server = sealed_server(dir.path(), Some(7));
    let mut c = Conn::new(&server);
    fill(&mut c, 6000, 1, 1000);
    c.set("secret-key", b"secret-value");
    c.ask("delete key5\r\n", 1);
    // Values on flash only come back through the seal.
    for k in (0..6000).step_by(7) {
        let key = format!("key{k}");
        match c.get(&key) {
            Some(v) => assert_eq!(check(&key, &v), Some(0)),
            None => assert_eq!(k, 5),
        }
    }
    assert!(c.stat("flash_hits") > 0);
    drop(c);
    server.stop().unwrap();
    let raw = std::fs::read(dir.path().join("cache.flash")).unwrap();
    let contains = |needle: &[u8]| raw.windows(needle.len()).any(|w| w == needle);
    assert!(!contains(b"secret-key") && !contains(b"secret-value") && !contains(b"key1234|"));

    // Restart with the same key: everything is back.
    let server = sealed_server(dir.path(), Some(7));
    let mut c = Conn::new(&server);
    assert_eq!(c.get("secret-key").as_deref(), Some(&b"secret-value"[..]));
    assert_eq!(c.get("key5"), None);
    for k in (1..6000).step_by(11) {
        let key = format!("key{k}");
        assert_eq!(check(&key, &c.get(&key).expect("back")), Some(0));
    }
    drop(c);
    server.stop().unwrap();
    // With the wrong key, or none, nothing is served (and nothing wrong).
    for key in [Some(8), None] {
        let server = sealed_server(dir.path(), key);
        let mut c = Conn::new(&server);
        assert_eq!(c.get("secret-key"), None);
        assert_eq!(c.get("key1"), None);
        drop(c);
        server.stop().unwrap();
    }
}

/// A stale item (md I) stays stale when its value moves to flash and comes back, and across a
/// restart: `mg` keeps answering `X` (and a first fetch wins `W`), never a fresh-looking value.
#[test]
fn stale_items_stay_stale_through_flash_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(c.set("stale", b"old"), "STORED");
    assert_eq!(c.ask("md stale I\r\n", 1), ["HD"]);
    assert_eq!(c.ask("mg stale v\r\n", 2), ["VA 3 X W", "old"]);
    // Push it out of DRAM (8000 x 1 KiB into ~4 MiB of DRAM): it is read back from flash.
    fill(&mut c, 8000, 1, 1000);
    let before = c.stat("dram_hits");
    // The win token lives in DRAM only: after the trip to flash a fetch may win again.
    let l = c.ask("mg stale v\r\n", 2);
    assert!(l[0] == "VA 3 X W" || l[0] == "VA 3 Z X", "{l:?}");
    assert_eq!(l[1], "old");
    // Not from DRAM: from its log record (on flash, or still in a log buffer).
    assert_eq!(c.stat("dram_hits"), before, "read back from its log record");
    drop(c);
    server.stop().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(c.ask("mg stale v\r\n", 2), ["VA 3 X W", "old"]);
    // A plain set makes it fresh again.
    assert_eq!(c.set("stale", b"new"), "STORED");
    assert_eq!(c.ask("mg stale v\r\n", 2), ["VA 3", "new"]);
    server.stop().unwrap();
}

mod index_size {
    //! The DRAM index's size per cached item with the flash full, its false positives, and
    //! restarts through the checkpoint (current and older format).
    use crate::common::{check, value};
    use inpath_cache::store::{Mode, StoreReq};
    use inpath_cache::{Store, StoreConfig};
    use std::collections::HashMap;
    use std::sync::Arc;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn set(value: &[u8]) -> StoreReq<'_> {
        StoreReq::new(Mode::Set, 0, 0, value, None)
    }

    fn stats(store: &Store) -> HashMap<&'static str, String> {
        store.stats().into_iter().collect()
    }

    fn num(s: &HashMap<&'static str, String>, k: &str) -> f64 {
        s[k].parse()
            .unwrap_or_else(|_| panic!("stat {k} = {}", s[k]))
    }

    /// Nine-byte keys, all distinct.
    fn key(i: u64) -> String {
        format!("k{i:08}")
    }

    /// Sets distinct keys with `vlen`-byte self-checking values until the log has reclaimed
    /// `reclaim` chunks (the flash is full); returns how many keys were written.
    fn fill_until_reclaimed(
        rt: &tokio::runtime::Runtime,
        store: &Arc<Store>,
        vlen: usize,
        reclaim: f64,
    ) -> u64 {
        let mut i = 0;
        rt.block_on(async {
            loop {
                let k = key(i);
                store.store(k.as_bytes(), set(&value(&k, i, vlen))).await;
                i += 1;
                if i % 1000 == 0 && num(&stats(store), "flash_chunks_reclaimed") >= reclaim {
                    return i;
                }
            }
        })
    }

    /// Reads back the last `n` keys written: (hits, misses); a hit must be the value written.
    fn read_recent(
        rt: &tokio::runtime::Runtime,
        store: &Arc<Store>,
        written: u64,
        n: u64,
    ) -> (u64, u64) {
        rt.block_on(async {
            let (mut hits, mut misses) = (0, 0);
            for i in written.saturating_sub(n)..written {
                let k = key(i);
                match store.get(k.as_bytes(), None).await {
                    Some(it) => {
                        assert_eq!(check(&k, &it.value), Some(i), "wrong value for {k}");
                        hits += 1;
                    }
                    None => misses += 1,
                }
            }
            (hits, misses)
        })
    }

    /// Gets of `n` absent keys as long as the stored ones: (index false positives, flash
    /// reads) they caused.
    fn absent_gets(rt: &tokio::runtime::Runtime, store: &Arc<Store>, n: u64) -> (f64, f64) {
        let before = stats(store);
        rt.block_on(async {
            for i in 0..n {
                let k = format!("x{i:08}");
                assert!(store.get(k.as_bytes(), None).await.is_none());
            }
        });
        let after = stats(store);
        let d = |k: &str| num(&after, k) - num(&before, k);
        (d("index_false_positives"), d("flash_reads"))
    }

    /// Rewrites the checkpoint's version field (and its CRC, so only the version differs).
    fn set_checkpoint_version(path: &std::path::Path, version: u32) {
        let mut data = std::fs::read(path).unwrap();
        data[8..12].copy_from_slice(&version.to_le_bytes());
        let body = data.len() - 12;
        let crc = crc32fast::hash(&data[..body]);
        data[body..body + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(path, &data).unwrap();
    }

    /// The default sizing scaled down (64 MiB of flash, `--avg-item-size` 1 KiB, 1 KiB
    /// values; DRAM the smallest the chunk buffers allow): with the flash full the index costs
    /// at most 16 bytes per item, recent keys read back, and both a restart through the
    /// checkpoint and one whose checkpoint is of the older format (refused, the log replayed)
    /// keep the items.
    #[test]
    fn index_fits_16_bytes_per_item_with_the_flash_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StoreConfig::new(dir.path().join("f"));
        cfg.memory = 8 << 20;
        cfg.flash_size = 64 << 20;
        let rt = rt();
        let store = Store::open(cfg.clone()).unwrap();
        let written = fill_until_reclaimed(&rt, &store, 1024, 4.0);
        let s = stats(&store);
        let per = num(&s, "index_bytes_per_item");
        assert!(per <= 16.0, "{per} index bytes per item: {s:?}");
        let items = num(&s, "curr_items");
        assert!(items > 55_000.0, "{s:?}");
        let conflicts = num(&s, "evictions") - num(&s, "flash_reclaimed_items");
        assert!(
            conflicts < items / 100.0,
            "{conflicts} conflict evictions: {s:?}"
        );
        let (hits, misses) = read_recent(&rt, &store, written, 5000);
        assert!(misses <= 50, "recent keys: {hits} hits, {misses} misses");
        store.close().unwrap();
        let items = num(&stats(&store), "curr_items");
        drop(store);
        // A restart writes on in a fresh chunk, which reclaims the oldest one: at most one
        // chunk's records (1080 bytes each) go.
        let chunk_records = num(&s, "flash_chunk_bytes") / 1080.0;

        // Restart through the checkpoint.
        let store = Store::open(cfg.clone()).unwrap();
        assert!(store.recovery.checkpoint_loaded, "{:?}", store.recovery);
        let recovered = store.recovery.items as f64;
        assert!(
            recovered <= items && items - recovered <= chunk_records,
            "{items} items before: {:?}",
            store.recovery
        );
        let per = num(&stats(&store), "index_bytes_per_item");
        assert!(per <= 16.0, "{per} after the restart");
        let (hits2, _) = read_recent(&rt, &store, written, 5000);
        assert!(
            hits2 >= hits,
            "{hits2} hits after the restart, {hits} before"
        );
        store.close().unwrap();
        let items = num(&stats(&store), "curr_items");
        drop(store);

        // A checkpoint of the older format is refused (never read as this one) and the log
        // replayed instead.
        let ckpt = dir.path().join("f.ckpt");
        set_checkpoint_version(&ckpt, 1);
        let store = Store::open(cfg).unwrap();
        let r = &store.recovery;
        assert!(!r.checkpoint_loaded, "{r:?}");
        assert!(r.checkpoint_note.contains("version"), "{r:?}");
        let recovered = r.items as f64;
        assert!(
            recovered <= items && items - recovered <= chunk_records,
            "{items} items before: {r:?}"
        );
        let (hits3, _) = read_recent(&rt, &store, written, 5000);
        assert!(
            hits3 >= hits,
            "{hits3} hits after the replay, {hits} before"
        );
        store.close().unwrap();
    }

    /// A flash file too large for the index's location window is refused at start, naming
    /// the limit; one just under it is taken.
    #[test]
    fn flash_over_the_location_window_is_refused() {
        let mut cfg = StoreConfig::new("unused".into());
        cfg.memory = 1 << 40;
        cfg.flash_size = 1 << 40;
        let err = inpath_cache::Geometry::of(&cfg).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        cfg.flash_size = 1000 << 30;
        assert!(inpath_cache::Geometry::of(&cfg).is_ok());
    }

    /// The real default sizing (64 MiB of DRAM, 1 GiB of flash, `--avg-item-size` 1 KiB) filled
    /// with 1 KiB values until the flash is full: prints the index's bytes per item, conflict
    /// evictions, and the false positives of a million gets of absent keys. Writes a 1 GiB
    /// file under the system's temporary directory (or `INPATH_CACHE_MEASURE_DIR`).
    #[test]
    #[ignore = "writes a 1 GiB flash file; run with --ignored --nocapture"]
    fn index_bytes_per_item_at_the_default_sizing() {
        let base = std::env::var_os("INPATH_CACHE_MEASURE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::tempdir_in(base).unwrap();
        let cfg = StoreConfig::new(dir.path().join("f"));
        let rt = rt();
        let store = Store::open(cfg).unwrap();
        let written = fill_until_reclaimed(&rt, &store, 1024, 8.0);
        let s = stats(&store);
        let items = num(&s, "curr_items");
        let conflicts = num(&s, "evictions") - num(&s, "flash_reclaimed_items");
        let (hits, misses) = read_recent(&rt, &store, written, 20_000);
        let absent = 1_000_000;
        let (fp, reads) = absent_gets(&rt, &store, absent);
        println!(
            "default sizing, flash full: {written} keys written, {items} items, index {} bytes \
             ({} entries): {} bytes per item; conflict evictions {conflicts} ({:.3} % of items); \
             last 20000 keys: {hits} hits, {misses} misses; {absent} absent keys: {fp} false \
             positives ({:.2e} per miss), {reads} flash reads",
            s["index_bytes"],
            s["index_entries"],
            s["index_bytes_per_item"],
            100.0 * conflicts / items,
            fp / absent as f64,
        );
        assert!(num(&s, "index_bytes_per_item") <= 16.0);
        store.close().unwrap();
    }
}

/// A multiget over keys some of which are in DRAM and some only on flash answers each key as
/// a single get does, in order.
#[test]
fn multigets_mixing_dram_and_flash_values_answer_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    fill(&mut c, 8000, 1, 1000);
    let keys: Vec<String> = (0..8000).step_by(13).map(|k| format!("key{k}")).collect();
    let single: Vec<Option<Vec<u8>>> = keys.iter().map(|k| c.get(k)).collect();
    assert!(c.stat("flash_hits") > 0, "some values came from flash");
    c.send(format!("get {} nokey\r\n", keys.join(" ")).as_bytes());
    let mut got = Vec::new();
    loop {
        let l = c.line();
        if l == "END" {
            break;
        }
        let p: Vec<&str> = l.split(' ').collect();
        let n: usize = p[3].parse().unwrap();
        let v = c.bytes(n + 2);
        got.push((p[1].to_string(), v[..n].to_vec()));
    }
    let want: Vec<(String, Vec<u8>)> = keys
        .iter()
        .zip(single)
        .filter_map(|(k, v)| v.map(|v| (k.clone(), v)))
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the multiget differs from the single gets");
    for (k, v) in &got {
        assert_eq!(check(k, v), Some(0));
    }
    server.stop().unwrap();
}
