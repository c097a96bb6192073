//! Shared helpers: a server on 127.0.0.1 port 0 with a temporary flash file, and a raw client.
#![allow(dead_code)]

use inpath_cache::{Server, ServerConfig, StoreConfig};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

/// The open-file limit this test binary asks for (soft limit, up to the hard one).
const NOFILE_WANTED: u64 = 8_000;

/// The open-file limit of this process, raised once for the whole binary (towards
/// [`NOFILE_WANTED`], never above the hard limit) before the first server starts. The limit is
/// process-wide: raising it here, not inside the one test that needs thousands of descriptors,
/// means every test of the binary runs under the same limit whatever the order they run in.
pub fn nofile_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| rlimit::increase_nofile_limit(NOFILE_WANTED).unwrap_or(1024))
}

/// A small store: 8 MiB of DRAM (about 4 MiB for values) and `flash_mib` of flash.
pub fn config(dir: &Path, flash_mib: u64) -> ServerConfig {
    nofile_limit();
    let mut store = StoreConfig::new(dir.join("cache.flash"));
    store.memory = 8 << 20;
    store.flash_size = flash_mib << 20;
    store.item_max = 1 << 20;
    let mut cfg = ServerConfig::new("127.0.0.1:0", store);
    cfg.threads = 2;
    cfg.sync_interval = Duration::from_millis(20);
    cfg
}

pub fn start(dir: &Path) -> Server {
    Server::start(config(dir, 12)).expect("server starts")
}

pub struct Conn {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Conn {
    pub fn new(server: &Server) -> Conn {
        let s = TcpStream::connect(server.local_addr()).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
    pub fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).expect("send");
    }
    pub fn line(&mut self) -> String {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).expect("read line");
        assert!(l.ends_with(b"\r\n"), "unterminated reply {l:?}");
        String::from_utf8_lossy(&l[..l.len() - 2]).into_owned()
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.r.read_exact(&mut v).expect("read data");
        v
    }
    /// Sends `req` and reads `n` reply lines.
    pub fn ask(&mut self, req: &str, n: usize) -> Vec<String> {
        self.send(req.as_bytes());
        (0..n).map(|_| self.line()).collect()
    }
    pub fn set(&mut self, key: &str, value: &[u8]) -> String {
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.send(&req);
        self.line()
    }
    /// A single-key get: the value or None.
    pub fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.send(format!("get {key}\r\n").as_bytes());
        let l = self.line();
        if l == "END" {
            return None;
        }
        let len: usize = l.rsplit(' ').next().unwrap().parse().expect("length");
        let v = self.bytes(len + 2);
        assert_eq!(self.line(), "END");
        Some(v[..len].to_vec())
    }
    pub fn stats(&mut self) -> std::collections::HashMap<String, String> {
        self.send(b"stats\r\n");
        let mut m = std::collections::HashMap::new();
        loop {
            let l = self.line();
            if l == "END" {
                return m;
            }
            let mut p = l.splitn(3, ' ');
            p.next();
            let (k, v) = (p.next().unwrap(), p.next().unwrap_or(""));
            m.insert(k.to_string(), v.to_string());
        }
    }
    pub fn stat(&mut self, name: &str) -> u64 {
        self.stats()
            .get(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
            .parse()
            .unwrap()
    }
}

/// A value that identifies itself: `key|version|` then filler, then an 8-byte FNV hash.
pub fn value(key: &str, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{key}|{version}|").into_bytes();
    let mut x = version.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() + 8 < len.max(v.len() + 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    let h = fnv(&v);
    v.extend_from_slice(&h.to_le_bytes());
    v
}

pub fn fnv(d: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in d {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Whether `v` is an intact value written for `key`; returns its version.
pub fn check(key: &str, v: &[u8]) -> Option<u64> {
    if v.len() < 8 {
        return None;
    }
    let (body, h) = v.split_at(v.len() - 8);
    if fnv(body).to_le_bytes() != h {
        return None;
    }
    let text = String::from_utf8_lossy(body);
    let mut p = text.splitn(3, '|');
    if p.next()? != key {
        return None;
    }
    p.next()?.parse().ok()
}

/// Sets `key0..key{keys-1}` to their self-checking values of version `version` (`size` bytes),
/// pipelined with noreply, then waits for the server to have read them all (`mn`).
pub fn set_all(c: &mut Conn, keys: usize, version: u64, size: usize) {
    let mut req = Vec::new();
    for k in 0..keys {
        let key = format!("key{k}");
        let v = value(&key, version, size);
        req.extend_from_slice(format!("set {key} 0 0 {} noreply\r\n", v.len()).as_bytes());
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        if req.len() > 256 * 1024 {
            c.send(&req);
            req.clear();
        }
    }
    req.extend_from_slice(b"mn\r\n");
    c.send(&req);
    assert_eq!(c.line(), "MN");
}
