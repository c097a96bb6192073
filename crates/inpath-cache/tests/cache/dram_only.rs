//! The DRAM-only mode (no flash file, memcached's model): the same index, values evicted when
//! DRAM is full, `-M` (no evictions: stores fail instead), `-C` (no CAS) and `-A` (`shutdown`).

use crate::common::*;
use inpath_cache::{Server, ServerConfig, StoreConfig};
use std::time::{Duration, Instant};

fn dram_config(memory: u64) -> ServerConfig {
    nofile_limit();
    let mut store = StoreConfig::dram_only();
    store.memory = memory;
    let mut cfg = ServerConfig::new("127.0.0.1:0", store);
    cfg.threads = 2;
    cfg
}

/// Filling 3x the memory evicts the oldest values; what is served is always the right value,
/// the newest keys are there, and nothing touches a file.
#[test]
fn dram_only_evicts_and_never_serves_a_wrong_value() {
    let server = Server::start(dram_config(4 << 20)).expect("server starts");
    assert!(!server.store().has_flash());
    let mut c = Conn::new(&server);
    let n = 12_000u64; // ~12 MiB of 1 KiB values into 4 MiB
    for i in 0..n {
        let key = format!("k{i}");
        assert_eq!(c.set(&key, &value(&key, i, 1000)), "STORED");
    }
    let s = c.stats();
    let stat = |k: &str| s[k].parse::<u64>().unwrap();
    assert!(stat("evictions") > 0, "{s:?}");
    assert!(stat("bytes") <= stat("dram_limit_bytes"), "{s:?}");
    assert_eq!(stat("flash_bytes_written"), 0);
    assert_eq!(stat("curr_items"), stat("dram_items"));
    let (mut hits, mut recent_hits) = (0, 0);
    for i in 0..n {
        let key = format!("k{i}");
        if let Some(v) = c.get(&key) {
            assert_eq!(check(&key, &v), Some(i), "wrong value for {key}");
            hits += 1;
            if i >= n - 500 {
                recent_hits += 1;
            }
        }
    }
    assert!(hits > 1000 && hits < n, "{hits} hits of {n}");
    assert!(
        recent_hits >= 450,
        "only {recent_hits} of the newest 500 kept"
    );
    server.stop().unwrap();
}

/// With evictions off a full cache answers `SERVER_ERROR out of memory storing object` and
/// keeps every value it took; a failed set removes the key's old value, as memcached does.
#[test]
fn evictions_off_refuse_stores_and_keep_every_value() {
    let mut cfg = dram_config(4 << 20);
    cfg.store.evictions = false;
    let server = Server::start(cfg).expect("server starts");
    let mut c = Conn::new(&server);
    let mut stored = 0u64;
    let mut refused = None;
    for i in 0..20_000u64 {
        let key = format!("k{i}");
        match c.set(&key, &value(&key, i, 1000)).as_str() {
            "STORED" => stored += 1,
            "SERVER_ERROR out of memory storing object" => {
                refused = Some(i);
                break;
            }
            other => panic!("unexpected reply {other:?}"),
        }
    }
    let first_refused = refused.expect("a full cache refuses a store");
    assert!(stored > 1000);
    let s = c.stats();
    let stat = |k: &str| s[k].parse::<u64>().unwrap();
    assert_eq!(stat("evictions"), 0);
    // Refused for memory, not for an index conflict: the values nearly fill the budget.
    assert!(
        stat("dram_bytes") + 2 * 1200 > stat("dram_limit_bytes"),
        "refused with room left: {s:?}"
    );
    for i in 0..stored {
        let key = format!("k{i}");
        let v = c
            .get(&key)
            .unwrap_or_else(|| panic!("{key} lost with evictions off"));
        assert_eq!(check(&key, &v), Some(i));
    }
    // A bigger value for a stored key does not fit either: the old value goes (no stale data).
    assert_eq!(
        c.set("k0", &value("k0", 99, 4000)),
        "SERVER_ERROR out of memory storing object"
    );
    assert_eq!(c.get("k0"), None);
    // incr that cannot store its new value says so.
    let key = format!("k{first_refused}");
    assert_eq!(c.get(&key), None);
    assert_eq!(
        c.ask("stats settings\r\n", 8)
            .iter()
            .filter(|l| l.as_str() == "STAT evictions off")
            .count(),
        1
    );
    server.stop().unwrap();
}

/// CAS off: every cas is 0, `cas` is not checked, `stats settings` says so.
#[test]
fn cas_off_reports_zero_and_does_not_check() {
    let mut cfg = dram_config(8 << 20);
    cfg.store.cas = false;
    let server = Server::start(cfg).expect("server starts");
    let mut c = Conn::new(&server);
    assert_eq!(c.set("a", b"xy"), "STORED");
    assert_eq!(c.ask("gets a\r\n", 3), ["VALUE a 0 2 0", "xy", "END"]);
    assert_eq!(c.ask("cas a 0 0 1 12345\r\nz\r\n", 1), ["STORED"]);
    assert_eq!(c.ask("mg a c v\r\n", 2), ["VA 1 c0", "z"]);
    c.send(b"stats settings\r\n");
    let settings: Vec<String> = std::iter::from_fn(|| Some(c.line()))
        .take_while(|l| l != "END")
        .collect();
    assert!(
        settings.contains(&"STAT cas_enabled no".to_string()),
        "{settings:?}"
    );
    server.stop().unwrap();
}

/// `shutdown` is refused unless enabled; enabled, it closes the connection without a reply and
/// the server stops by itself (as after SIGINT), while `shutdown` with a bad mode is an error.
#[test]
fn shutdown_command_stops_the_server_only_when_enabled() {
    let server = Server::start(dram_config(8 << 20)).expect("server starts");
    let mut c = Conn::new(&server);
    assert_eq!(c.ask("shutdown\r\n", 1), ["ERROR: shutdown not enabled"]);
    server.stop().unwrap();

    let mut cfg = dram_config(8 << 20);
    cfg.shutdown_command = true;
    let server = Server::start(cfg).expect("server starts");
    let addr = server.local_addr();
    let mut c = Conn::new(&server);
    assert_eq!(
        c.ask("shutdown now\r\n", 1),
        ["CLIENT_ERROR invalid shutdown mode"]
    );
    c.send(b"shutdown\r\n");
    let mut rest = Vec::new();
    use std::io::Read;
    let n = c.r.read_to_end(&mut rest).expect("the connection closes");
    assert_eq!(n, 0, "no reply to shutdown: {rest:?}");
    // The server stops on its own: `wait` returns, and the port stops accepting.
    let deadline = Instant::now() + Duration::from_secs(20);
    server.wait().unwrap();
    assert!(Instant::now() < deadline);
    assert!(std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());
}

/// A DRAM-only store that cannot hold its index and one item is refused with the sizes.
#[test]
fn dram_only_memory_too_small_is_refused_with_the_sizes() {
    let cfg = dram_config(1 << 20);
    let err = match Server::start(cfg) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("1 MiB should be too small"),
    };
    assert!(err.contains("memory 1048576 bytes is too small"), "{err}");
    let mut cfg = StoreConfig::new(std::env::temp_dir().join("never-created.flash"));
    cfg.evictions = false;
    let err = match inpath_cache::Store::open(cfg) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("-M with flash is refused"),
    };
    assert!(err.contains("only without a flash file"), "{err}");
}

/// `-o idle_timeout`: a connection that waits longer for a request is closed (counted in
/// `idle_kicks`); a busy one is not.
#[test]
fn idle_connections_are_closed_after_the_timeout() {
    let mut cfg = dram_config(8 << 20);
    cfg.idle_timeout = Some(Duration::from_secs(1));
    let server = Server::start(cfg).expect("server starts");
    let mut idle = Conn::new(&server);
    let mut busy = Conn::new(&server);
    assert_eq!(idle.ask("version\r\n", 1).len(), 1);
    let start = Instant::now();
    // The busy connection asks every 200 ms for 2.5 s.
    while start.elapsed() < Duration::from_millis(2500) {
        assert_eq!(busy.ask("mn\r\n", 1), ["MN"]);
        std::thread::sleep(Duration::from_millis(200));
    }
    use std::io::Read;
    let mut rest = Vec::new();
    assert_eq!(idle.r.read_to_end(&mut rest).expect("closed"), 0);
    let s = busy.stats();
    assert_eq!(s["idle_kicks"], "1", "{s:?}");
    busy.send(b"stats settings\r\n");
    let settings: Vec<String> = std::iter::from_fn(|| Some(busy.line()))
        .take_while(|l| l != "END")
        .collect();
    assert!(settings.contains(&"STAT idle_timeout 1".to_string()));
    server.stop().unwrap();
}
