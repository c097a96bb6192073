//! The memory bound: a server with a 32 MiB budget runs in a child process (this test binary
//! run again for the ignored test [`child_server`], which serves until its standard input
//! closes), a load fills it, and the child's peak resident size (`VmHWM`) must stay under the
//! budget plus a stated overhead.
//!
//! What the budget covers (`--memory`, docs/cache.md "Sizing"): the index, the log buffers (four
//! chunks) and the hot values (key + value + 64 bytes each). What it does not, and so the
//! overhead allowed here:
//!
//! - the process itself: the test binary's code and data, the tokio runtimes, the threads'
//!   stacks as far as they are touched, the allocator's own slack: [`RUNTIME_OVERHEAD`];
//! - per connection, its buffers: a read buffer that grows to hold the largest request (a
//!   command line up to 64 KiB plus a value up to `item_max`, doubling: at most twice that) and
//!   an output buffer of up to 256 KiB plus one value: [`PER_CONNECTION`] for each connection
//!   that sends a large request, and 64 KiB for each small one.
//!
//! The load: sets of sizes from 10 bytes to 200 KiB (about three times the budget), multigets
//! of thousands of keys naming 200 KiB values (a reply of 300 MB each, read slowly), 64
//! connections at once, eight of them with a 200 KiB value half sent, and mutated streams from
//! the protocol fuzzer.

use crate::fuzz::{exchange, mutated_stream, mutation_corpus, random_cuts};
use inpath_cache::{Server, ServerConfig, StoreConfig};
use inpath_testkit::fuzz::Mutator;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set in the child's environment: the directory for its flash file.
const CHILD_VAR: &str = "INPATH_CACHE_MEMORY_CHILD";
const CHILD_TEST: &str = "memory::child_server";
/// The DRAM budget (`--memory`).
const BUDGET: u64 = 32 << 20;
const ITEM_MAX: usize = 256 << 10;
/// The process beyond the store: code, runtimes, stacks, allocator slack.
const RUNTIME_OVERHEAD: u64 = 24 << 20;
/// A connection with a request of `ITEM_MAX`: read buffer 2 × (64 KiB + item), output 256 KiB
/// plus one value and its line.
const PER_CONNECTION: u64 = 2 * (64 << 10) + 2 * ITEM_MAX as u64 + (256 << 10) + ITEM_MAX as u64;
/// Connections at once that send large requests, and small ones.
const BIG_CONNS: u64 = 8 + 2;
const SMALL_CONNS: u64 = 64;
const READ_TIMEOUT: Duration = Duration::from_secs(20);
/// Set in the child's environment for [`flash_hits_stay_within_the_budget`].
const FLASH_HITS_VAR: &str = "INPATH_CACHE_MEMORY_FLASH_HITS";
/// Its DRAM budget (128 MiB of flash, a working set of ~90 MB).
const FLASH_BUDGET: u64 = 16 << 20;

/// Run by the parent in a child process: serves until standard input closes (the parent's end
/// of the pipe goes when it finishes or dies), at most five minutes.
#[test]
#[ignore = "the server of memory_stays_within_the_budget, run in a child process"]
fn child_server() {
    let Ok(dir) = std::env::var(CHILD_VAR) else {
        return; // run by hand without the parent: nothing to do
    };
    let mut store = StoreConfig::new(std::path::Path::new(&dir).join("cache.flash"));
    store.memory = BUDGET;
    store.flash_size = 24 << 20;
    store.item_max = ITEM_MAX;
    if std::env::var_os(FLASH_HITS_VAR).is_some() {
        // flash_hits_stay_within_the_budget: a working set ten times the DRAM, read at random.
        store.memory = FLASH_BUDGET;
        store.flash_size = 128 << 20;
        store.avg_item_size = 512;
    }
    let mut cfg = ServerConfig::new("127.0.0.1:0", store);
    cfg.threads = 2;
    cfg.sync_interval = Duration::from_millis(20);
    let server = Server::start(cfg).expect("server starts");
    println!("PORT {}", server.local_addr().port());
    std::io::stdout().flush().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(Duration::from_secs(300));
    server.stop().expect("clean stop");
}

/// The child, killed when the test ends however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Child {
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))
            .expect("the child's /proc status");
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

fn start_child(dir: &std::path::Path) -> (Child, SocketAddr) {
    start_child_with(dir, false)
}

fn start_child_with(dir: &std::path::Path, flash_hits: bool) -> (Child, SocketAddr) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    if flash_hits {
        cmd.env(FLASH_HITS_VAR, "1");
    }
    let mut child = Child(
        cmd.args(["--exact", CHILD_TEST, "--nocapture", "--include-ignored"])
            .args(["--test-threads", "1"])
            .env(CHILD_VAR, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the child starts"),
    );
    let out = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // The harness prints "test memory::child_server ... " before it on the line.
            if let Some((_, port)) = line.split_once("PORT ") {
                let _ = tx.send(port.trim().parse::<u16>().unwrap());
            }
        }
    });
    let port = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the child prints its port");
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    s
}

/// Reads until the replies so far end with `end` (bounded by the read timeout).
fn read_until_end(s: &mut TcpStream, end: &[u8], slowly: bool) -> usize {
    let mut buf = vec![0u8; 64 << 10];
    let mut tail: Vec<u8> = Vec::new();
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).expect("reply");
        assert!(n > 0, "the server closed");
        total += n;
        tail.extend_from_slice(&buf[..n]);
        if tail.ends_with(end) {
            return total;
        }
        let keep = tail.len().min(end.len());
        tail.drain(..tail.len() - keep);
        if slowly && total % (8 << 20) < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn value(len: usize, tag: u8) -> Vec<u8> {
    vec![b'a' + tag % 26; len]
}

/// Sets of varied sizes over one connection, pipelined 32 at a time.
fn fill(addr: SocketAddr, prefix: &str, m: &mut Mutator, bytes: usize) {
    let mut s = connect(addr);
    let mut sent = 0;
    let mut i = 0;
    while sent < bytes {
        let mut req = Vec::new();
        for _ in 0..32 {
            let len = match m.below(10) {
                0..5 => 10 + m.below(1000),
                5..9 => 1000 + m.below(20_000),
                _ => 100_000 + m.below(100_000),
            };
            req.extend_from_slice(format!("set {prefix}{i} 0 0 {len}\r\n").as_bytes());
            req.extend_from_slice(&value(len, i as u8));
            req.extend_from_slice(b"\r\n");
            sent += len;
            i += 1;
        }
        s.write_all(&req).unwrap();
        let mut got = vec![0u8; 32 * 8];
        s.read_exact(&mut got).expect("32 STORED");
        assert!(got.chunks(8).all(|c| c == b"STORED\r\n"), "{got:?}");
    }
}

#[test]
fn memory_stays_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = start_child(dir.path());
    let start_kib = child.status_kib("VmRSS:");
    let mut m = Mutator::new(0x3e3_0001);

    // Fill about three times the budget from four connections at once.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let mut m = Mutator::new(t);
            s.spawn(move || fill(addr, &format!("f{t}-"), &mut m, 3 * BUDGET as usize / 4));
        }
    });

    // Big multigets: 1500 hits on a 200 KiB value per line (300 MB of reply), two at once,
    // read slowly, while 64 other connections pipeline small requests and eight send half of
    // a 200 KiB value.
    let mut c = connect(addr);
    let big = value(200 << 10, 7);
    c.write_all(format!("set big 0 0 {}\r\n", big.len()).as_bytes())
        .unwrap();
    c.write_all(&big).unwrap();
    c.write_all(b"\r\n").unwrap();
    assert_eq!(read_until_end(&mut c, b"\r\n", false), 8);
    let mut halves: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut h = connect(addr);
            h.write_all(format!("set half 0 0 {}\r\n", 200 << 10).as_bytes())
                .unwrap();
            h.write_all(&big[..100 << 10]).unwrap();
            h
        })
        .collect();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(move || {
                let mut g = connect(addr);
                let mut line = b"get".to_vec();
                for _ in 0..1500 {
                    line.extend_from_slice(b" big");
                }
                line.extend_from_slice(b"\r\n");
                g.write_all(&line).unwrap();
                let n = read_until_end(&mut g, b"END\r\n", true);
                assert!(n > 1500 * (200 << 10), "{n} reply bytes");
            });
        }
        for t in 0..SMALL_CONNS {
            s.spawn(move || {
                let mut c = connect(addr);
                let mut req = Vec::new();
                for i in 0..50 {
                    req.extend_from_slice(format!("set s{t}-{i} 0 0 100\r\n").as_bytes());
                    req.extend_from_slice(&[b'v'; 100]);
                    req.extend_from_slice(b"\r\nget f0-1 f1-2 f2-3 f3-4\r\n");
                }
                req.extend_from_slice(b"mn\r\n");
                c.write_all(&req).unwrap();
                read_until_end(&mut c, b"MN\r\n", false);
            });
        }
    });
    for h in &mut halves {
        h.write_all(&big[100 << 10..]).unwrap();
        h.write_all(b"\r\n").unwrap();
        assert_eq!(read_until_end(h, b"\r\n", false), 8);
    }
    drop(halves);

    // The load filled the budget (before the mutated streams, whose flush_all empty it): the
    // hot values take most of what the index and the log buffers leave.
    let mut v = connect(addr);
    v.write_all(b"stats\r\nstats slabs\r\n").unwrap();
    let mut text = Vec::new();
    while !text.ends_with(b"END\r\n") || text.windows(5).filter(|w| w == b"END\r\n").count() < 2 {
        let mut b = [0u8; 4096];
        let n = v.read(&mut b).expect("stats");
        assert!(n > 0, "the server closed");
        text.extend_from_slice(&b[..n]);
    }
    let text = String::from_utf8(text).unwrap();
    let stat = |name: &str| -> u64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (hot, limit) = (stat("total_malloced"), stat("dram_limit_bytes"));
    assert!(
        hot * 10 >= limit * 8,
        "hot values {hot} bytes of {limit}: the budget was not filled"
    );

    // Mutated streams from the protocol fuzzer, to the end.
    let corpus = mutation_corpus(0x3e3_0002);
    for _ in 0..150 {
        let (stream, _) = mutated_stream(&mut m, &corpus);
        let cuts = random_cuts(&mut m, stream.len());
        exchange(addr, &stream, &cuts).expect("a mutated stream");
    }
    let peak = child.status_kib("VmHWM:") << 10;
    let bound = BUDGET + RUNTIME_OVERHEAD + BIG_CONNS * PER_CONNECTION + SMALL_CONNS * (64 << 10);
    eprintln!(
        "memory: budget {} MiB (hot values {:.1} MiB), RSS at start {:.1} MiB, peak RSS {:.1} MiB, \
         bound {:.1} MiB",
        BUDGET >> 20,
        hot as f64 / (1 << 20) as f64,
        start_kib as f64 / 1024.0,
        peak as f64 / (1 << 20) as f64,
        bound as f64 / (1 << 20) as f64
    );
    assert!(
        peak <= bound,
        "peak RSS {peak} bytes over the bound {bound} (budget {BUDGET})"
    );
    drop(child);
}

/// The flash-hit path (issue 56: 195 MiB of anonymous memory under `-m 64` once): a working set
/// ten times the budget of small values (100 to 700 bytes), then random gets from four
/// connections, nearly all of them flash hits that move a value into DRAM and another out. The
/// child's anonymous memory at the end and its peak resident size stay within the budget plus
/// the process's own overhead ([`RUNTIME_OVERHEAD`]) and four small connections.
#[test]
fn flash_hits_stay_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (child, addr) = start_child_with(dir.path(), true);
    const KEYS: u64 = 150_000;
    let mut s = connect(addr);
    let mut req = Vec::new();
    for i in 0..KEYS {
        let len = 100 + (i * 7919 % 600) as usize;
        req.extend_from_slice(format!("set m{i} 0 0 {len} noreply\r\n").as_bytes());
        req.extend_from_slice(&value(len, i as u8));
        req.extend_from_slice(b"\r\n");
        if req.len() > 256 << 10 || i + 1 == KEYS {
            req.extend_from_slice(b"mn\r\n");
            s.write_all(&req).unwrap();
            req.clear();
            read_until_end(&mut s, b"MN\r\n", false);
        }
    }
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            sc.spawn(move || {
                let mut c = connect(addr);
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t;
                for _ in 0..50 {
                    let mut line = Vec::new();
                    for _ in 0..50 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        line.extend_from_slice(format!("get m{}\r\n", x % KEYS).as_bytes());
                    }
                    c.write_all(&line).unwrap();
                    let mut ends = 0;
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    let mut l = String::new();
                    while ends < 50 {
                        l.clear();
                        r.read_line(&mut l).expect("reply");
                        if l == "END\r\n" {
                            ends += 1;
                        } else if let Some(n) = l.strip_prefix("VALUE ") {
                            let len: usize =
                                n.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
                            let mut v = vec![0u8; len + 2];
                            r.read_exact(&mut v).unwrap();
                        }
                    }
                }
            });
        }
    });
    let mut v = connect(addr);
    v.write_all(b"stats\r\n").unwrap();
    let mut text = Vec::new();
    while !text.ends_with(b"END\r\n") {
        let mut b = [0u8; 4096];
        let n = v.read(&mut b).expect("stats");
        assert!(n > 0, "the server closed");
        text.extend_from_slice(&b[..n]);
    }
    let text = String::from_utf8(text).unwrap();
    let stat = |name: &str| -> u64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(stat("flash_hits") > 5_000, "{text}");
    let anon = child.status_kib("RssAnon:") << 10;
    let peak = child.status_kib("VmHWM:") << 10;
    let bound = FLASH_BUDGET + RUNTIME_OVERHEAD + 4 * (64 << 10);
    eprintln!(
        "memory with flash hits: budget {} MiB, {} flash hits, anonymous {:.1} MiB, peak RSS \
         {:.1} MiB, bound {:.1} MiB",
        FLASH_BUDGET >> 20,
        stat("flash_hits"),
        anon as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
        bound as f64 / (1 << 20) as f64
    );
    assert!(
        anon <= bound,
        "anonymous memory {anon} over the bound {bound}"
    );
    assert!(peak <= bound, "peak RSS {peak} over the bound {bound}");
    drop(child);
}
