//! A bounded, deterministic protocol fuzzer against an in-process server (stable Rust, part of
//! the normal test suite), driven by the seeded mutator of `inpath_testkit::fuzz`.
//!
//! - [`valid_streams_match_a_model`]: pipelined batches of well-formed commands of every kind
//!   (classic storage with binary values holding `\r\n` and NUL, multi-key get/gets/gat/gats,
//!   cas, delete, incr/decr, touch, flush_all, stats and its subcommands, verbosity, version,
//!   noreply, the meta commands with their flags and base64 keys, mn), each batch cut at random
//!   byte boundaries (one small batch at every byte). Every reply is checked against a
//!   `HashMap` model (the store is big enough that nothing is evicted): exactly the replies the
//!   requests call for, byte for byte, with cas values captured and checked for consistency.
//!   A get line over 64 KiB may be answered in full or refused with `CLIENT_ERROR line too
//!   long` and a close (the refusal is to become streaming; both are accepted).
//! - [`mutated_streams_never_break_the_server`]: the same commands mutated (the testkit's
//!   mutations, data shorter or longer than declared, negative and huge lengths, lines over
//!   64 KiB, `\n` without `\r`, random bytes, `noreply` anywhere, truncated streams), pipelined
//!   and cut at random. The replies must be a well-formed sequence of memcached replies, the
//!   server must close the connection once the client has finished sending (no stall: every
//!   read has a timeout), no server thread may panic, and a fresh connection must still get
//!   its `version` after each case. Where a trailing `mn` finds the stream in sync, its `MN`
//!   must be the last reply.
//!
//! The seed is fixed; `INPATH_CACHE_FUZZ_SEED=<n>` picks another, and every failure prints the
//! seed it ran with.

use crate::common::*;
use inpath_cache::Server;
use inpath_testkit::fuzz::Mutator;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::time::Duration;

const SEED_VAR: &str = "INPATH_CACHE_FUZZ_SEED";
/// Longest wait for the next reply bytes: far above any reply time, so only a stall trips it.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most reply bytes one exchange may bring (a bound, not an expectation).
const REPLY_CAP: usize = 256 << 20;
/// The server's request line limit (proto::MAX_LINE).
const MAX_LINE: usize = 64 * 1024;
/// The fuzz server's item size limit.
const ITEM_MAX: usize = 1 << 20;

/// The seed: `INPATH_CACHE_FUZZ_SEED` (decimal or 0x-hex) or the test's own.
pub fn seed(default: u64) -> u64 {
    let Ok(s) = std::env::var(SEED_VAR) else {
        return default;
    };
    let s = s.trim();
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a number"))
}

static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts panics on the server's own threads (a panic in a connection task is caught by the
/// runtime and would otherwise only show as a dropped connection).
pub fn watch_server_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let server_thread = std::thread::current()
                .name()
                .is_none_or(|n| n.starts_with("inpath-cache") || n.starts_with("tokio"));
            if server_thread {
                SERVER_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

pub fn server_panics() -> usize {
    SERVER_PANICS.load(Ordering::SeqCst)
}

fn fuzz_server(dir: &std::path::Path) -> Server {
    watch_server_panics();
    let mut cfg = config(dir, 64);
    cfg.store.memory = 16 << 20;
    cfg.store.item_max = ITEM_MAX;
    // The text protocol's fuzzer: a mutated stream starting with the binary magic byte must
    // not switch the connection to the binary protocol (tests/cache/binary.rs covers that).
    cfg.protocol = inpath_cache::Protocol::Ascii;
    Server::start(cfg).expect("server starts")
}

/// Shows at most 300 bytes of `b`.
pub fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned();
    if b.len() > 300 {
        format!("{s:?}... ({} bytes)", b.len())
    } else {
        format!("{s:?}")
    }
}

/// Sends `stream` to `addr` in pieces ending at `cuts` (a short pause after each, so the server
/// mostly reads them apart), then shuts the writing side; returns all the server sent until it
/// closed, and whether all of `stream` could be sent (a server that closes early ends the
/// sending). Err: no reply bytes for [`READ_TIMEOUT`] (a stall) or more than [`REPLY_CAP`].
pub fn exchange(
    addr: SocketAddr,
    stream: &[u8],
    cuts: &[usize],
) -> Result<(Vec<u8>, bool), String> {
    let sock = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    sock.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    sock.set_nodelay(true).unwrap();
    let mut reader = sock.try_clone().unwrap();
    std::thread::scope(|s| {
        let r = s.spawn(move || {
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut chunk) {
                    Ok(0) => return Ok(got),
                    Ok(n) => {
                        got.extend_from_slice(&chunk[..n]);
                        if got.len() > REPLY_CAP {
                            return Err(format!("more than {REPLY_CAP} reply bytes"));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        return Err(format!(
                            "stall: no reply for {READ_TIMEOUT:?} after {} bytes, ending {}",
                            got.len(),
                            show(&got[got.len().saturating_sub(200)..])
                        ));
                    }
                    // A reset after the server closed with our bytes unread: the end.
                    Err(_) => return Ok(got),
                }
            }
        });
        let mut w = &sock;
        let mut from = 0;
        let mut sent_all = true;
        for &cut in cuts {
            if w.write_all(&stream[from..cut]).is_err() {
                sent_all = false; // closed by the server
                break;
            }
            from = cut;
            if cuts.len() > 1 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        let _ = sock.shutdown(Shutdown::Write);
        r.join().expect("reader thread").map(|got| (got, sent_all))
    })
}

/// Random cut points for `len` bytes: about one per 700 bytes, at most 40, the last `len`.
pub fn random_cuts(m: &mut Mutator, len: usize) -> Vec<usize> {
    let n = (len / 700).clamp(1, 40);
    let mut cuts: Vec<usize> = (0..m.below(n + 1)).map(|_| m.below(len + 1)).collect();
    cuts.push(len);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Checks that a fresh connection is served and that no server thread panicked.
pub fn assert_alive(server: &Server, what: &dyn Fn() -> String) {
    assert_eq!(server_panics(), 0, "a server thread panicked: {}", what());
    let mut c = Conn::new(server);
    c.w.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
    c.r.get_ref().set_read_timeout(Some(READ_TIMEOUT)).unwrap();
    let l = c.ask("version\r\n", 1);
    assert!(
        l[0].starts_with("VERSION "),
        "version on a fresh connection: {l:?}; {}",
        what()
    );
}

// ---- the model ----

#[derive(Clone, Debug)]
struct Item {
    flags: u32,
    value: Vec<u8>,
    version: u64,
    /// The cas value, once a reply showed it for this version.
    cas: Option<u64>,
}

#[derive(Default)]
struct Model {
    items: HashMap<Vec<u8>, Item>,
    next_version: u64,
}

impl Model {
    fn write(&mut self, key: &[u8], flags: u32, value: Vec<u8>, expired: bool) -> u64 {
        self.next_version += 1;
        if expired {
            self.items.remove(key);
        } else {
            self.items.insert(
                key.to_vec(),
                Item {
                    flags,
                    value,
                    version: self.next_version,
                    cas: None,
                },
            );
        }
        self.next_version
    }
}

/// A cas value seen in a reply belongs to one version of one key.
type Slot = (Vec<u8>, u64);

enum Tok {
    Lit(Vec<u8>),
    /// `c<cas>`.
    Cas(Slot),
    /// A letter and an integer (`t<ttl>`).
    Num(u8),
}

enum Expect {
    Line(Vec<u8>),
    Prefix(Vec<u8>),
    Value {
        key: Vec<u8>,
        flags: u32,
        data: Vec<u8>,
        cas: Option<Slot>,
    },
    Meta {
        toks: Vec<Tok>,
        data: Option<Vec<u8>>,
    },
    /// `STAT` lines, then `END`.
    Stats,
    /// A get line over 64 KiB: these replies, or `CLIENT_ERROR line too long` and the end.
    LongGet(Vec<Expect>),
}

fn lit(s: impl AsRef<[u8]>) -> Tok {
    Tok::Lit(s.as_ref().to_vec())
}

fn b64(data: &[u8]) -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        out.push(A[(n >> 18) as usize & 63]);
        out.push(A[(n >> 12) as usize & 63]);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63]
        } else {
            b'='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63]
        } else {
            b'='
        });
    }
    out
}

fn counter(v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.trim_end_matches(' ');
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Keys the classic commands can carry (no spaces, no control bytes).
fn text_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..14).map(|i| format!("k{i}").into_bytes()).collect();
    keys.push(b"a:b/c?d=e&f".to_vec());
    keys.push("ключ".as_bytes().to_vec());
    keys.push(vec![b'x'; 250]);
    keys.push(b"END".to_vec());
    keys.push(b"VALUE".to_vec());
    keys
}

/// Keys only the meta commands reach, base64-encoded (`b`).
fn binary_keys() -> Vec<Vec<u8>> {
    vec![
        b"bin\x00key".to_vec(),
        b"sp ace\r\nkey".to_vec(),
        vec![0xff; 10],
    ]
}

/// One request and the replies it calls for.
pub struct Req {
    pub bytes: Vec<u8>,
    expect: Vec<Expect>,
}

/// Generates well-formed requests, predicting their replies with the model.
struct Gen {
    m: Mutator,
    model: Model,
    text_keys: Vec<Vec<u8>>,
    bin_keys: Vec<Vec<u8>>,
    /// Short values only (for the batch cut at every byte).
    small: bool,
}

const EXPTIMES: [(&str, bool); 4] = [("0", false), ("0", false), ("86400", false), ("-1", true)];

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            m: Mutator::new(seed),
            model: Model::default(),
            text_keys: text_keys(),
            bin_keys: binary_keys(),
            small: false,
        }
    }

    fn chance(&mut self, pct: usize) -> bool {
        self.m.below(100) < pct
    }

    fn key(&mut self) -> Vec<u8> {
        self.text_keys[self.m.below(self.text_keys.len())].clone()
    }

    /// A key for a meta command: (key, token to send, base64?).
    fn meta_key(&mut self) -> (Vec<u8>, Vec<u8>, bool) {
        if self.chance(25) {
            let k = if self.chance(50) {
                self.bin_keys[self.m.below(self.bin_keys.len())].clone()
            } else {
                self.key()
            };
            let raw = b64(&k);
            // memcached checks the key token's length before decoding it: an encoded key
            // over 250 bytes is `CLIENT_ERROR bad command line format`, so none is sent.
            if raw.len() <= 250 {
                return (k, raw, true);
            }
            let k = self.key();
            (k.clone(), k, false)
        } else {
            let k = self.key();
            (k.clone(), k, false)
        }
    }

    fn value(&mut self) -> Vec<u8> {
        if self.chance(20) {
            let n = self.m.next_u64() >> self.m.below(64);
            return match self.m.below(5) {
                0 => b"18446744073709551615".to_vec(),
                1 => format!("{n}  ").into_bytes(),
                2 => b"007".to_vec(),
                _ => n.to_string().into_bytes(),
            };
        }
        let len = match self.m.below(100) {
            _ if self.small => self.m.below(24),
            0..70 => self.m.below(64),
            70..92 => 64 + self.m.below(4032),
            92..99 => 4096 + self.m.below(60_000),
            _ => 65_536 + self.m.below(200_000),
        };
        let mut v: Vec<u8> = (0..len).map(|_| self.m.next_u64() as u8).collect();
        for _ in 0..self.m.below(4) {
            let piece: &[u8] = [
                &b"\r\n"[..],
                b"\0",
                b"END\r\n",
                b"VALUE k0 0 1\r\n",
                b"\r\nmn\r\n",
            ][self.m.below(5)];
            let at = self.m.below(v.len() + 1);
            v.splice(at..at, piece.iter().copied());
        }
        v
    }

    fn noreply(&mut self) -> bool {
        self.chance(15)
    }

    fn flags(&mut self) -> u32 {
        match self.m.below(4) {
            0 => 0,
            1 => u32::MAX,
            _ => self.m.next_u64() as u32 >> self.m.below(32),
        }
    }

    /// One well-formed request (never a get line over 64 KiB: see `long_get`).
    fn request(&mut self) -> Req {
        match self.m.below(100) {
            0..30 => self.storage(),
            30..33 => self.cas(),
            33..45 => self.get(),
            45..50 => self.gat(),
            50..54 => self.delete(),
            54..60 => self.arith(),
            60..63 => self.touch(),
            63..64 => self.flush_all(),
            64..67 => self.stats(),
            67..69 => self.misc(),
            69..79 => self.mg(),
            79..88 => self.ms(),
            88..92 => self.md(),
            _ => self.ma(),
        }
    }

    fn storage(&mut self) -> Req {
        let cmd = ["set", "set", "add", "replace", "append", "prepend"][self.m.below(6)];
        let key = self.key();
        let flags = self.flags();
        let (exp, expired) = EXPTIMES[self.m.below(EXPTIMES.len())];
        let value = self.value();
        let noreply = self.noreply();
        let mut bytes = format!("{cmd} ").into_bytes();
        bytes.extend_from_slice(&key);
        bytes.extend_from_slice(format!(" {flags} {exp} {}", value.len()).as_bytes());
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(&value);
        bytes.extend_from_slice(b"\r\n");
        let cur = self.model.items.get(&key).cloned();
        let reply: &[u8] = match (cmd, cur) {
            ("set", _) | ("add", None) | ("replace", Some(_)) => {
                self.model.write(&key, flags, value, expired);
                b"STORED"
            }
            ("append" | "prepend", Some(it)) => {
                if it.value.len() + value.len() > ITEM_MAX {
                    b"SERVER_ERROR object too large for cache"
                } else {
                    let v = if cmd == "append" {
                        [it.value, value].concat()
                    } else {
                        [value, it.value].concat()
                    };
                    self.model.write(&key, it.flags, v, false);
                    b"STORED"
                }
            }
            _ => b"NOT_STORED",
        };
        let expect = if noreply {
            vec![]
        } else {
            vec![Expect::Line(reply.to_vec())]
        };
        Req { bytes, expect }
    }

    fn cas(&mut self) -> Req {
        let key = self.key();
        let flags = self.flags();
        let value = self.value();
        let noreply = self.noreply();
        let cur = self.model.items.get(&key).cloned();
        let matching = cur.as_ref().and_then(|c| c.cas).filter(|_| self.chance(70));
        let cas = match (matching, &cur) {
            (Some(c), _) => c,
            (None, Some(Item { cas: Some(c), .. })) => c.wrapping_add(1),
            _ => u64::MAX,
        };
        let mut bytes = b"cas ".to_vec();
        bytes.extend_from_slice(&key);
        bytes.extend_from_slice(format!(" {flags} 0 {} {cas}", value.len()).as_bytes());
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(&value);
        bytes.extend_from_slice(b"\r\n");
        let reply: &[u8] = match (cur, matching) {
            (None, _) => b"NOT_FOUND",
            (Some(_), Some(_)) => {
                self.model.write(&key, flags, value, false);
                b"STORED"
            }
            (Some(_), None) => b"EXISTS",
        };
        let expect = if noreply {
            vec![]
        } else {
            vec![Expect::Line(reply.to_vec())]
        };
        Req { bytes, expect }
    }

    fn value_expect(&self, key: &[u8], with_cas: bool) -> Option<Expect> {
        let it = self.model.items.get(key)?;
        Some(Expect::Value {
            key: key.to_vec(),
            flags: it.flags,
            data: it.value.clone(),
            cas: with_cas.then(|| (key.to_vec(), it.version)),
        })
    }

    fn get_keys(&mut self, keys: &[Vec<u8>], cmd: &str) -> Req {
        let mut bytes = cmd.as_bytes().to_vec();
        let mut expect = Vec::new();
        for k in keys {
            bytes.push(b' ');
            bytes.extend_from_slice(k);
            expect.extend(self.value_expect(k, cmd == "gets"));
        }
        bytes.extend_from_slice(b"\r\n");
        expect.push(Expect::Line(b"END".to_vec()));
        Req { bytes, expect }
    }

    fn get(&mut self) -> Req {
        let n = 1 + self.m.below(8);
        let keys: Vec<Vec<u8>> = (0..n).map(|_| self.key()).collect();
        let cmd = if self.chance(50) { "get" } else { "gets" };
        self.get_keys(&keys, cmd)
    }

    /// A get line over 64 KiB (the last request of its batch).
    fn long_get(&mut self) -> Req {
        // Keys to small values or none: thousands of hits on one large value would make a
        // reply of gigabytes (the memory test covers big multigets).
        let keys: Vec<Vec<u8>> = self
            .text_keys
            .iter()
            .take(14)
            .filter(|k| {
                self.model
                    .items
                    .get(*k)
                    .is_none_or(|it| it.value.len() <= 1024)
            })
            .cloned()
            .collect();
        let keys = if keys.is_empty() {
            vec![b"absent".to_vec()]
        } else {
            keys
        };
        let target = MAX_LINE + 1 + self.m.below(8000);
        let (mut picked, mut len) = (Vec::new(), 4);
        while len <= target {
            let k = keys[self.m.below(keys.len())].clone();
            len += k.len() + 1;
            picked.push(k);
        }
        let cmd = if self.chance(50) { "get" } else { "gets" };
        let r = self.get_keys(&picked, cmd);
        assert!(r.bytes.len() > MAX_LINE);
        Req {
            bytes: r.bytes,
            expect: vec![Expect::LongGet(r.expect)],
        }
    }

    fn gat(&mut self) -> Req {
        let (exp, expired) = EXPTIMES[self.m.below(EXPTIMES.len())];
        let cmd = if self.chance(50) { "gat" } else { "gats" };
        let mut bytes = format!("{cmd} {exp}").into_bytes();
        let mut expect = Vec::new();
        for _ in 0..1 + self.m.below(5) {
            let k = self.key();
            bytes.push(b' ');
            bytes.extend_from_slice(&k);
            expect.extend(self.value_expect(&k, cmd == "gats"));
            if expired {
                self.model.items.remove(&k);
            }
        }
        bytes.extend_from_slice(b"\r\n");
        expect.push(Expect::Line(b"END".to_vec()));
        Req { bytes, expect }
    }

    fn delete(&mut self) -> Req {
        let key = self.key();
        let noreply = self.noreply();
        let mut bytes = b"delete ".to_vec();
        bytes.extend_from_slice(&key);
        if self.chance(20) {
            bytes.extend_from_slice(b" 0");
        }
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        let hit = self.model.items.remove(&key).is_some();
        let expect = match (noreply, hit) {
            (true, _) => vec![],
            (false, true) => vec![Expect::Line(b"DELETED".to_vec())],
            (false, false) => vec![Expect::Line(b"NOT_FOUND".to_vec())],
        };
        Req { bytes, expect }
    }

    fn delta(&mut self) -> u64 {
        match self.m.below(4) {
            0 => 1,
            1 => u64::MAX,
            _ => self.m.next_u64() >> self.m.below(64),
        }
    }

    fn arith(&mut self) -> Req {
        let incr = self.chance(50);
        let key = self.key();
        let delta = self.delta();
        let noreply = self.noreply();
        let mut bytes = if incr {
            b"incr ".to_vec()
        } else {
            b"decr ".to_vec()
        };
        bytes.extend_from_slice(&key);
        bytes.extend_from_slice(format!(" {delta}").as_bytes());
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        let reply = match self.model.items.get(&key).cloned() {
            None => b"NOT_FOUND".to_vec(),
            Some(it) => match counter(&it.value) {
                None => b"CLIENT_ERROR cannot increment or decrement non-numeric value".to_vec(),
                Some(v) => {
                    let v = if incr {
                        v.wrapping_add(delta)
                    } else {
                        v.saturating_sub(delta)
                    };
                    self.model
                        .write(&key, it.flags, v.to_string().into_bytes(), false);
                    v.to_string().into_bytes()
                }
            },
        };
        let expect = if noreply {
            vec![]
        } else {
            vec![Expect::Line(reply)]
        };
        Req { bytes, expect }
    }

    fn touch(&mut self) -> Req {
        let key = self.key();
        let (exp, expired) = EXPTIMES[self.m.below(EXPTIMES.len())];
        let noreply = self.noreply();
        let mut bytes = b"touch ".to_vec();
        bytes.extend_from_slice(&key);
        bytes.extend_from_slice(format!(" {exp}").as_bytes());
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        let hit = self.model.items.contains_key(&key);
        if hit && expired {
            self.model.items.remove(&key);
        }
        let expect = match (noreply, hit) {
            (true, _) => vec![],
            (false, true) => vec![Expect::Line(b"TOUCHED".to_vec())],
            (false, false) => vec![Expect::Line(b"NOT_FOUND".to_vec())],
        };
        Req { bytes, expect }
    }

    fn flush_all(&mut self) -> Req {
        let noreply = self.noreply();
        let mut bytes = b"flush_all".to_vec();
        if self.chance(50) {
            bytes.extend_from_slice(b" 0");
        }
        if noreply {
            bytes.extend_from_slice(b" noreply");
        }
        bytes.extend_from_slice(b"\r\n");
        self.model.items.clear();
        let expect = if noreply {
            vec![]
        } else {
            vec![Expect::Line(b"OK".to_vec())]
        };
        Req { bytes, expect }
    }

    fn stats(&mut self) -> Req {
        let (cmd, expect): (&str, Expect) = match self.m.below(10) {
            0..3 => ("stats", Expect::Stats),
            3 => ("stats settings", Expect::Stats),
            4 => ("stats items", Expect::Stats),
            5 => ("stats slabs", Expect::Stats),
            6 => ("stats sizes", Expect::Stats),
            7 => ("stats detail dump", Expect::Line(b"END".to_vec())),
            8 => ("stats reset", Expect::Line(b"RESET".to_vec())),
            _ => (
                "stats cachedump 64 1",
                Expect::Line(b"CLIENT_ERROR Illegal slab id".to_vec()),
            ),
        };
        Req {
            bytes: format!("{cmd}\r\n").into_bytes(),
            expect: vec![expect],
        }
    }

    fn misc(&mut self) -> Req {
        match self.m.below(3) {
            0 => Req {
                bytes: b"version\r\n".to_vec(),
                expect: vec![Expect::Prefix(b"VERSION ".to_vec())],
            },
            1 => {
                let noreply = self.noreply();
                Req {
                    bytes: if noreply {
                        b"verbosity 1 noreply\r\n".to_vec()
                    } else {
                        b"verbosity 1\r\n".to_vec()
                    },
                    expect: if noreply {
                        vec![]
                    } else {
                        vec![Expect::Line(b"OK".to_vec())]
                    },
                }
            }
            _ => Req {
                bytes: b"mn\r\n".to_vec(),
                expect: vec![Expect::Line(b"MN".to_vec())],
            },
        }
    }

    /// Meta flags picked from `pool`, in random order, without repeats.
    fn pick_flags(&mut self, pool: &[&str]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for f in pool {
            if self.chance(35) {
                let at = self.m.below(out.len() + 1);
                out.insert(at, f.as_bytes().to_vec());
            }
        }
        out
    }

    fn opaque(&mut self) -> Vec<u8> {
        format!("O{}", self.m.next_u64() % 100_000).into_bytes()
    }

    /// The request line of a meta command.
    fn meta_line(cmd: &str, raw: &[u8], extra: &str, flags: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = format!("{cmd} ").into_bytes();
        bytes.extend_from_slice(raw);
        bytes.extend_from_slice(extra.as_bytes());
        for f in flags {
            bytes.push(b' ');
            bytes.extend_from_slice(f);
        }
        bytes.extend_from_slice(b"\r\n");
        bytes
    }

    /// O and k echoes (as every meta reply carries them).
    fn echo(toks: &mut Vec<Tok>, f: &[u8], raw: &[u8], binary: bool) {
        match f[0] {
            b'O' => toks.push(Tok::Lit(f.to_vec())),
            b'k' => {
                toks.push(Tok::Lit([&b"k"[..], raw].concat()));
                if binary {
                    toks.push(lit("b"));
                }
            }
            _ => {}
        }
    }

    fn mg(&mut self) -> Req {
        let (key, raw, binary) = self.meta_key();
        let o = self.opaque();
        let o = String::from_utf8(o).unwrap();
        let mut flags = self.pick_flags(&["v", "f", "s", "k", "c", "t", "q", &o]);
        if binary {
            flags.push(b"b".to_vec());
        }
        let bytes = Self::meta_line("mg", &raw, "", &flags);
        let q = flags.iter().any(|f| f == b"q");
        let v = flags.iter().any(|f| f == b"v");
        let expect = match self.model.items.get(&key) {
            None if q => vec![],
            None => {
                let mut toks = vec![lit("EN")];
                for f in &flags {
                    Self::echo(&mut toks, f, &raw, binary);
                }
                vec![Expect::Meta { toks, data: None }]
            }
            Some(it) => {
                let mut toks = if v {
                    vec![lit("VA"), lit(it.value.len().to_string())]
                } else {
                    vec![lit("HD")]
                };
                for f in &flags {
                    match f[0] {
                        b'c' => toks.push(Tok::Cas((key.clone(), it.version))),
                        b'f' => toks.push(lit(format!("f{}", it.flags))),
                        b's' => toks.push(lit(format!("s{}", it.value.len()))),
                        b't' => toks.push(Tok::Num(b't')),
                        _ => Self::echo(&mut toks, f, &raw, binary),
                    }
                }
                vec![Expect::Meta {
                    toks,
                    data: v.then(|| it.value.clone()),
                }]
            }
        };
        Req { bytes, expect }
    }

    fn ms(&mut self) -> Req {
        let (key, raw, binary) = self.meta_key();
        let value = self.value();
        let cur = self.model.items.get(&key).cloned();
        let mode = [b'S', b'S', b'E', b'A', b'P', b'R'][self.m.below(6)];
        let new_flags = self.flags();
        let (exp, expired) = EXPTIMES[self.m.below(EXPTIMES.len())];
        let o = String::from_utf8(self.opaque()).unwrap();
        let (f, t) = (format!("F{new_flags}"), format!("T{exp}"));
        let mut flags = self.pick_flags(&["q", "k", "c", "s", &o, &f, &t]);
        if mode != b'S' || self.chance(30) {
            let at = self.m.below(flags.len() + 1);
            let m = if self.chance(50) {
                mode
            } else {
                mode.to_ascii_lowercase()
            };
            flags.insert(at, vec![b'M', m]);
        }
        let known = cur.as_ref().and_then(|c| c.cas);
        let cas = if self.chance(20) {
            let c = match known {
                Some(c) if self.chance(70) => c,
                Some(c) => c.wrapping_add(1),
                None => u64::MAX,
            };
            flags.push(format!("C{c}").into_bytes());
            Some(c)
        } else {
            None
        };
        if binary {
            flags.push(b"b".to_vec());
        }
        let mut bytes = Self::meta_line("ms", &raw, &format!(" {}", value.len()), &flags);
        bytes.extend_from_slice(&value);
        bytes.extend_from_slice(b"\r\n");
        let has = |c: u8| flags.iter().any(|f| f[0] == c);
        let req_flags = if has(b'F') { new_flags } else { 0 };
        let req_expired = has(b'T') && expired;
        let outcome: Result<(u64, usize), &str> = match &cur {
            None if cas.is_some() => Err("NF"),
            None if matches!(mode, b'S' | b'E') => {
                let len = value.len();
                Ok((self.model.write(&key, req_flags, value, req_expired), len))
            }
            None => Err("NS"),
            Some(it) if cas.is_some_and(|c| Some(c) != it.cas) => Err("EX"),
            Some(_) if mode == b'E' => Err("NS"),
            Some(it) if matches!(mode, b'A' | b'P') => {
                if it.value.len() + value.len() > ITEM_MAX {
                    Err("TOO_LARGE")
                } else {
                    let v = if mode == b'A' {
                        [it.value.clone(), value].concat()
                    } else {
                        [value, it.value.clone()].concat()
                    };
                    let len = v.len();
                    Ok((self.model.write(&key, it.flags, v, false), len))
                }
            }
            Some(_) => {
                let len = value.len();
                Ok((self.model.write(&key, req_flags, value, req_expired), len))
            }
        };
        let q = has(b'q');
        let expect = match outcome {
            Err("TOO_LARGE") => vec![Expect::Line(
                b"SERVER_ERROR object too large for cache".to_vec(),
            )],
            Ok(_) if q => vec![],
            _ => {
                let code = match outcome {
                    Ok(_) => "HD",
                    Err(c) => c,
                };
                let mut toks = vec![lit(code)];
                for f in &flags {
                    match (f[0], outcome) {
                        (b'c', Ok((version, _))) => toks.push(Tok::Cas((key.clone(), version))),
                        (b'c', Err(_)) => toks.push(lit("c0")),
                        (b's', Ok((_, size))) => toks.push(lit(format!("s{size}"))),
                        _ => Self::echo(&mut toks, f, &raw, binary),
                    }
                }
                vec![Expect::Meta { toks, data: None }]
            }
        };
        Req { bytes, expect }
    }

    fn md(&mut self) -> Req {
        let (key, raw, binary) = self.meta_key();
        let o = String::from_utf8(self.opaque()).unwrap();
        let mut flags = self.pick_flags(&["q", "k", &o]);
        let cur = self.model.items.get(&key).cloned();
        let mut cas_ok = true;
        if self.chance(20) {
            let c = match cur.as_ref().and_then(|c| c.cas) {
                Some(c) if self.chance(70) => c,
                Some(c) => {
                    cas_ok = false;
                    c.wrapping_add(1)
                }
                None => {
                    cas_ok = false;
                    u64::MAX
                }
            };
            flags.push(format!("C{c}").into_bytes());
        }
        if binary {
            flags.push(b"b".to_vec());
        }
        let bytes = Self::meta_line("md", &raw, "", &flags);
        let code = match cur {
            None => "NF",
            Some(_) if !cas_ok => "EX",
            Some(_) => {
                self.model.items.remove(&key);
                "HD"
            }
        };
        let q = flags.iter().any(|f| f == b"q");
        let expect = if q && code == "HD" {
            vec![]
        } else {
            let mut toks = vec![lit(code)];
            for f in &flags {
                Self::echo(&mut toks, f, &raw, binary);
            }
            vec![Expect::Meta { toks, data: None }]
        };
        Req { bytes, expect }
    }

    fn ma(&mut self) -> Req {
        let (key, raw, binary) = self.meta_key();
        let o = String::from_utf8(self.opaque()).unwrap();
        let delta = self.delta();
        let initial = self.m.next_u64() >> self.m.below(64);
        let d = format!("D{delta}");
        let (n, j) = (
            format!("N{}", ["0", "86400"][self.m.below(2)]),
            format!("J{initial}"),
        );
        let mode = ["MI", "MD", "M+", "M-", "Mi", "Md"][self.m.below(6)];
        let flags = self.pick_flags(&["q", "k", "v", "t", "c", &o, &d, &n, &j, "T86400", mode]);
        let mut flags = flags;
        if binary {
            flags.push(b"b".to_vec());
        }
        let bytes = Self::meta_line("ma", &raw, "", &flags);
        let has = |c: u8| flags.iter().any(|f| f[0] == c);
        let delta = if has(b'D') { delta } else { 1 };
        let incr = !flags
            .iter()
            .any(|f| f[0] == b'M' && matches!(f[1], b'D' | b'd' | b'-'));
        let initial = if has(b'J') { initial } else { 0 };
        let result: Result<(u64, u64), &str> = match self.model.items.get(&key).cloned() {
            None if has(b'N') => {
                let version = self
                    .model
                    .write(&key, 0, initial.to_string().into_bytes(), false);
                Ok((initial, version))
            }
            None => Err("NF"),
            Some(it) => match counter(&it.value) {
                None => Err("NON_NUMERIC"),
                Some(v) => {
                    let v = if incr {
                        v.wrapping_add(delta)
                    } else {
                        v.saturating_sub(delta)
                    };
                    let version =
                        self.model
                            .write(&key, it.flags, v.to_string().into_bytes(), false);
                    Ok((v, version))
                }
            },
        };
        let q = has(b'q');
        let v = has(b'v');
        let expect = match result {
            Err("NON_NUMERIC") => vec![Expect::Line(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value".to_vec(),
            )],
            Err(code) => {
                let mut toks = vec![lit(code)];
                for f in &flags {
                    Self::echo(&mut toks, f, &raw, binary);
                }
                vec![Expect::Meta { toks, data: None }]
            }
            Ok(_) if q && !v => vec![],
            Ok((value, version)) => {
                let text = value.to_string().into_bytes();
                let mut toks = if v {
                    vec![lit("VA"), lit(text.len().to_string())]
                } else {
                    vec![lit("HD")]
                };
                for f in &flags {
                    match f[0] {
                        b'c' => toks.push(Tok::Cas((key.clone(), version))),
                        b't' => toks.push(Tok::Num(b't')),
                        _ => Self::echo(&mut toks, f, &raw, binary),
                    }
                }
                vec![Expect::Meta {
                    toks,
                    data: v.then_some(text),
                }]
            }
        };
        Req { bytes, expect }
    }
}

// ---- reading replies ----

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn line(&mut self) -> Result<&'a [u8], String> {
        let rest = &self.b[self.at..];
        let Some(n) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Err(if rest.is_empty() {
                "the replies ended".into()
            } else {
                format!("an unterminated reply line {}", show(rest))
            });
        };
        self.at += n + 2;
        Ok(&rest[..n])
    }

    fn data(&mut self, n: usize) -> Result<&'a [u8], String> {
        let rest = &self.b[self.at..];
        if rest.len() < n + 2 || &rest[n..n + 2] != b"\r\n" {
            return Err(format!("a data block of {n} bytes missing: {}", show(rest)));
        }
        self.at += n + 2;
        Ok(&rest[..n])
    }
}

#[derive(Default)]
struct CasSeen {
    by_slot: HashMap<Slot, u64>,
    by_cas: HashMap<u64, Slot>,
}

impl CasSeen {
    fn saw(&mut self, slot: &Slot, cas: u64) -> Result<(), String> {
        if let Some(&c) = self.by_slot.get(slot) {
            if c != cas {
                return Err(format!("cas {cas} for a version that showed cas {c}"));
            }
        }
        if let Some(other) = self.by_cas.get(&cas) {
            if other != slot {
                return Err(format!("cas {cas} shown for two different versions"));
            }
        }
        self.by_slot.insert(slot.clone(), cas);
        self.by_cas.insert(cas, slot.clone());
        Ok(())
    }
}

fn check(e: &Expect, c: &mut Cursor, cas: &mut CasSeen) -> Result<(), String> {
    match e {
        Expect::Line(want) => {
            let got = c.line()?;
            if got != &want[..] {
                return Err(format!("expected {}, got {}", show(want), show(got)));
            }
        }
        Expect::Prefix(want) => {
            let got = c.line()?;
            if !got.starts_with(want) {
                return Err(format!("expected {}..., got {}", show(want), show(got)));
            }
        }
        Expect::Value {
            key,
            flags,
            data,
            cas: slot,
        } => {
            let got = c.line()?;
            let mut head = b"VALUE ".to_vec();
            head.extend_from_slice(key);
            head.extend_from_slice(format!(" {flags} {}", data.len()).as_bytes());
            let ok = match slot {
                None => got == &head[..],
                Some(slot) => match got
                    .strip_prefix(&head[..])
                    .and_then(|r| r.strip_prefix(b" "))
                {
                    Some(n) => match std::str::from_utf8(n).ok().and_then(|n| n.parse().ok()) {
                        Some(n) => {
                            cas.saw(slot, n)?;
                            true
                        }
                        None => false,
                    },
                    None => false,
                },
            };
            if !ok {
                return Err(format!("expected {}, got {}", show(&head), show(got)));
            }
            let got = c.data(data.len())?;
            if got != &data[..] {
                return Err(format!(
                    "value of {}: expected {}, got {}",
                    show(key),
                    show(data),
                    show(got)
                ));
            }
        }
        Expect::Meta { toks, data } => {
            let got = c.line()?;
            let parts: Vec<&[u8]> = got.split(|&b| b == b' ').collect();
            let bad = || {
                let want: Vec<String> = toks
                    .iter()
                    .map(|t| match t {
                        Tok::Lit(l) => String::from_utf8_lossy(l).into_owned(),
                        Tok::Cas(_) => "c<cas>".into(),
                        Tok::Num(p) => format!("{}<n>", *p as char),
                    })
                    .collect();
                format!("expected {:?}, got {}", want.join(" "), show(got))
            };
            if parts.len() != toks.len() {
                return Err(bad());
            }
            for (t, p) in toks.iter().zip(&parts) {
                let num = |p: &[u8]| {
                    std::str::from_utf8(p)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                };
                let ok = match t {
                    Tok::Lit(l) => p == &&l[..],
                    Tok::Num(c) => p.first() == Some(c) && num(&p[1..]).is_some(),
                    Tok::Cas(slot) => match p.strip_prefix(b"c").and_then(num) {
                        Some(n) if n > 0 => {
                            cas.saw(slot, n as u64)?;
                            true
                        }
                        _ => false,
                    },
                };
                if !ok {
                    return Err(bad());
                }
            }
            if let Some(d) = data {
                let got = c.data(d.len())?;
                if got != &d[..] {
                    return Err(format!(
                        "meta value: expected {}, got {}",
                        show(d),
                        show(got)
                    ));
                }
            }
        }
        Expect::Stats => loop {
            let got = c.line()?;
            if got == b"END" {
                break;
            }
            if !got.starts_with(b"STAT ") {
                return Err(format!("expected STAT or END, got {}", show(got)));
            }
        },
        Expect::LongGet(all) => {
            let start = c.at;
            let mut probe = CasSeen::default();
            let full = all.iter().try_for_each(|e| check(e, c, &mut probe));
            if let Err(full) = full {
                c.at = start;
                let got = c.line()?;
                if got != b"CLIENT_ERROR line too long" || c.at != c.b.len() {
                    return Err(format!(
                        "a get line over 64 KiB: neither its replies ({}) nor \
                         CLIENT_ERROR line too long and a close; got {}",
                        full,
                        show(got)
                    ));
                }
            } else {
                for (slot, n) in probe.by_slot {
                    cas.saw(&slot, n)?;
                }
            }
        }
    }
    Ok(())
}

/// Sends one batch and checks every reply; returns the cas values seen.
fn run_batch(addr: SocketAddr, reqs: &[Req], cuts: &[usize], seed: u64, batch: usize) -> CasSeen {
    let stream: Vec<u8> = reqs.iter().flat_map(|r| r.bytes.iter().copied()).collect();
    let (replies, _) = exchange(addr, &stream, cuts)
        .unwrap_or_else(|e| panic!("seed {seed} batch {batch}: {e} (rerun: {SEED_VAR}={seed})"));
    let mut c = Cursor { b: &replies, at: 0 };
    let mut cas = CasSeen::default();
    let mut closed = false;
    for (i, r) in reqs.iter().enumerate() {
        for e in &r.expect {
            if closed {
                break;
            }
            let before = c.at;
            if let Err(msg) = check(e, &mut c, &mut cas) {
                panic!(
                    "seed {seed} batch {batch} request #{i} {}: {msg}\n(earlier requests: {})\n\
                     rerun: {SEED_VAR}={seed}",
                    show(&r.bytes),
                    reqs[i.saturating_sub(3)..i]
                        .iter()
                        .map(|r| show(&r.bytes))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if matches!(e, Expect::LongGet(_)) && replies[before..].starts_with(b"CLIENT_ERROR") {
                closed = true;
            }
        }
    }
    assert_eq!(
        c.at,
        replies.len(),
        "seed {seed} batch {batch}: replies nobody asked for: {} (rerun: {SEED_VAR}={seed})",
        show(&replies[c.at..])
    );
    cas
}

#[test]
fn valid_streams_match_a_model() {
    let seed = seed(0xc0ff_ee01);
    let dir = tempfile::tempdir().unwrap();
    let server = fuzz_server(dir.path());
    let addr = server.local_addr();
    let mut g = Gen::new(seed);
    let batches = 80;
    for batch in 0..batches {
        // One small batch cut at every byte; the others at random points.
        let every_byte = batch == 1;
        let n = if every_byte { 12 } else { 20 + g.m.below(100) };
        g.small = every_byte;
        let mut reqs: Vec<Req> = (0..n).map(|_| g.request()).collect();
        if batch % 8 == 5 {
            reqs.push(g.long_get());
        }
        reqs.push(Req {
            bytes: b"mn\r\n".to_vec(),
            expect: vec![Expect::Line(b"MN".to_vec())],
        });
        let len: usize = reqs.iter().map(|r| r.bytes.len()).sum();
        let cuts: Vec<usize> = if every_byte {
            (1..=len).collect()
        } else {
            random_cuts(&mut g.m, len)
        };
        let cas = run_batch(addr, &reqs, &cuts, seed, batch);
        // Cas values a reply showed for the current version become usable in later batches.
        for (key, it) in g.model.items.iter_mut() {
            if let Some(&c) = cas.by_slot.get(&(key.clone(), it.version)) {
                it.cas = Some(c);
            }
        }
        assert_alive(&server, &|| format!("seed {seed} batch {batch}"));
    }
    drop(server);
}

// ---- mutated streams ----

/// A few hand-written edge requests beside the generated ones.
const EDGES: &[&[u8]] = &[
    b"set k0 0 0 5\r\nab\r\n",
    b"set k0 0 0 2\r\nabcdef\r\n",
    b"set k0 0 0 -1\r\nab\r\n",
    b"set k0 0 0 2147483647\r\nab\r\n",
    b"set k0 0 0 4294967296\r\nab\r\n",
    b"set k0 0 0 99999999999999999999\r\nab\r\n",
    b"set k0 0 0 1048577\r\nab\r\n",
    b"set k0 4294967296 0 1\r\na\r\n",
    b"set k0 0 99999999999 1\r\na\r\n",
    b"cas k0 0 0 1 -5\r\na\r\n",
    b"ms k0 -1\r\nab\r\n",
    b"ms k0 9223372036854775807\r\nab\r\n",
    b"ms k0 18446744073709551615 T0\r\nab\r\n",
    b"ms k0 2 MX\r\nab\r\n",
    b"ms k0 2 Z\r\nab\r\n",
    b"ms !!!! 2 b\r\nab\r\n",
    b"ms k0 2 O123456789012345678901234567890123456789\r\nab\r\n",
    b"mg\r\n",
    b"mg k0 T-99999999999 v\r\n",
    b"ma k0 D-1\r\n",
    b"ma k0 N1 J99999999999999999999999\r\n",
    b"md k0 C-1 q\r\n",
    b"incr k0 -1\r\n",
    b"incr k0 99999999999999999999\r\n",
    b"decr\r\n",
    b"touch k0 -99999999999\r\n",
    b"gat -1\r\n",
    b"gat abc k0\r\n",
    b"get\r\n",
    b"delete k0 1 2 3\r\n",
    b"flush_all -1\r\n",
    b"flush_all 1 2 3\r\n",
    b"verbosity\r\n",
    b"stats detail on\r\n",
    b"stats detail\r\n",
    b"stats nonsense\r\n",
    b"cache_memlimit 0\r\n",
    b"cache_memlimit 99999999999999999999\r\n",
    b"shutdown\r\n",
    b"\r\n",
    b"\n",
    b" \r\n",
    b"\0\0\0\r\n",
    b"noreply\r\n",
];

/// A well-formed reply line (data blocks are read by their lengths).
fn known_line(l: &[u8]) -> bool {
    const EXACT: &[&[u8]] = &[
        b"STORED",
        b"NOT_STORED",
        b"EXISTS",
        b"NOT_FOUND",
        b"DELETED",
        b"TOUCHED",
        b"END",
        b"OK",
        b"RESET",
        b"MN",
        b"ERROR",
    ];
    const PREFIX: &[&[u8]] = &[
        b"VERSION ",
        b"CLIENT_ERROR ",
        b"SERVER_ERROR ",
        b"STAT ",
        b"ITEM ",
        b"ERROR",
        b"MEMLIMIT_TOO_SMALL ",
    ];
    EXACT.contains(&l)
        || PREFIX.iter().any(|p| l.starts_with(p))
        || (!l.is_empty() && l.len() <= 20 && l.iter().all(u8::is_ascii_digit))
        || ([&b"HD"[..], b"NS", b"EX", b"NF", b"EN"]
            .iter()
            .any(|c| l == *c || (l.starts_with(c) && l.get(2) == Some(&b' '))))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn is_error(l: &[u8]) -> bool {
    l.starts_with(b"ERROR") || l.starts_with(b"CLIENT_ERROR ") || l.starts_with(b"SERVER_ERROR ")
}

/// Parses the whole reply stream; returns the last line.
fn well_formed(replies: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut c = Cursor { b: replies, at: 0 };
    let mut last = None;
    while c.at < replies.len() {
        let l = c.line()?;
        if !known_line(l) && !l.starts_with(b"VALUE ") && !l.starts_with(b"VA ") {
            return Err(format!("not a reply: {}", show(l)));
        }
        let parts: Vec<&[u8]> = l.split(|&b| b == b' ').collect();
        let len_at = if l.starts_with(b"VALUE ") { 3 } else { 1 };
        if l.starts_with(b"VALUE ") || l.starts_with(b"VA ") {
            let n: usize = parts
                .get(len_at)
                .and_then(|n| std::str::from_utf8(n).ok())
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("no length in {}", show(l)))?;
            c.data(n)?;
        }
        last = Some(l.to_vec());
    }
    Ok(last)
}

/// One mutated piece.
fn mutate_piece(m: &mut Mutator, piece: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let others: Vec<&[u8]> = (0..3)
        .map(|_| corpus[m.below(corpus.len())].as_slice())
        .collect();
    match m.below(12) {
        0..4 => m.mutate(piece, &others),
        4 => {
            // Data shorter or longer than declared: drop or add bytes before the final \r\n.
            let mut v = piece.to_vec();
            let end = v.len().saturating_sub(2);
            if m.below(2) == 0 {
                let n = m.below(end + 1).min(8);
                v.drain(end - n..end);
            } else {
                let junk: Vec<u8> = (0..1 + m.below(20)).map(|_| m.next_u64() as u8).collect();
                v.splice(end..end, junk);
            }
            v
        }
        5 => {
            // A length or number token replaced by an edge value.
            let text = piece.to_vec();
            let line_end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
            let mut toks: Vec<Vec<u8>> = text[..line_end]
                .split(|&b| b == b' ')
                .map(<[u8]>::to_vec)
                .collect();
            let at = m.below(toks.len());
            let edge: &[u8] = [
                &b"-1"[..],
                b"0",
                b"-0",
                b"2147483646",
                b"2147483648",
                b"4294967295",
                b"18446744073709551616",
                b"1048575",
                b"1048577",
                b"+5",
                b"1e3",
                b"",
            ][m.below(12)];
            toks[at] = edge.to_vec();
            let mut v = toks.join(&b' ');
            v.extend_from_slice(&text[line_end..]);
            v
        }
        6 => {
            // A line over 64 KiB: junk or a long multiget.
            let n = MAX_LINE + m.below(8000);
            let mut v = if m.below(2) == 0 {
                (0..n).map(|_| b'a' + (m.next_u64() % 26) as u8).collect()
            } else {
                let mut v = b"get".to_vec();
                while v.len() < n {
                    // Mostly keys nothing stores (thousands of hits on values other cases
                    // stored would make gigabytes of reply), a few that may hit.
                    let k = if m.below(400) == 0 {
                        format!(" k{}", m.below(14))
                    } else {
                        format!(" miss{}", m.below(1000))
                    };
                    v.extend_from_slice(k.as_bytes());
                }
                v
            };
            v.extend_from_slice(b"\r\n");
            v
        }
        7 => {
            // \n without \r.
            let mut v = Vec::with_capacity(piece.len());
            for (i, &b) in piece.iter().enumerate() {
                if !(b == b'\r' && piece.get(i + 1) == Some(&b'\n') && m.below(2) == 0) {
                    v.push(b);
                }
            }
            v
        }
        8 => (0..m.below(200)).map(|_| m.next_u64() as u8).collect(),
        9 => {
            // noreply somewhere in the line.
            let line_end = piece
                .iter()
                .position(|&b| b == b'\r')
                .unwrap_or(piece.len());
            let cuts: Vec<usize> = piece[..line_end]
                .iter()
                .enumerate()
                .filter(|(_, &b)| b == b' ')
                .map(|(i, _)| i)
                .chain([line_end])
                .collect();
            let at = cuts[m.below(cuts.len())];
            let mut v = piece.to_vec();
            v.splice(at..at, b" noreply".iter().copied());
            v
        }
        10 => EDGES[m.below(EDGES.len())].to_vec(),
        _ => {
            // Truncated.
            let mut v = piece.to_vec();
            v.truncate(m.below(piece.len() + 1));
            v
        }
    }
}

/// Valid requests (as the generator makes them, values under 70 KB) and the edge cases.
pub fn mutation_corpus(seed: u64) -> Vec<Vec<u8>> {
    let mut g = Gen::new(seed);
    let mut corpus: Vec<Vec<u8>> = (0..300).map(|_| g.request().bytes).collect();
    corpus.extend(EDGES.iter().map(|e| e.to_vec()));
    // Huge values make slow cases: the corpus keeps the smaller ones.
    corpus.retain(|p| p.len() < 70_000);
    corpus
}

/// A stream of 1 to 10 pieces of the corpus, two in three mutated, and whether it ends with an
/// `mn` marker.
pub fn mutated_stream(m: &mut Mutator, corpus: &[Vec<u8>]) -> (Vec<u8>, bool) {
    let mut stream = Vec::new();
    for _ in 0..1 + m.below(10) {
        let piece = &corpus[m.below(corpus.len())];
        if m.below(3) == 0 {
            stream.extend_from_slice(piece);
        } else {
            stream.extend(mutate_piece(m, piece, corpus));
        }
    }
    let marker = m.below(4) != 0;
    if marker {
        stream.extend_from_slice(b"mn\r\n");
    }
    (stream, marker)
}

#[test]
fn mutated_streams_never_break_the_server() {
    let seed = seed(0xc0ff_ee02);
    let dir = tempfile::tempdir().unwrap();
    let server = fuzz_server(dir.path());
    let addr = server.local_addr();
    let corpus = mutation_corpus(seed);
    let m = &mut Mutator::new(seed ^ 1);
    let (mut in_sync, mut cases) = (0usize, 0usize);
    for case in 0..1200 {
        let (stream, marker) = mutated_stream(m, &corpus);
        let cuts = if case % 50 == 7 && stream.len() < 2000 {
            (1..=stream.len()).collect()
        } else {
            random_cuts(m, stream.len())
        };
        let what = || {
            format!(
                "seed {seed} case {case}: stream {} (rerun: {SEED_VAR}={seed})",
                show(&stream)
            )
        };
        let (replies, sent_all) =
            exchange(addr, &stream, &cuts).unwrap_or_else(|e| panic!("{e}; {}", what()));
        let last = well_formed(&replies).unwrap_or_else(|e| panic!("{e}; {}", what()));
        cases += 1;
        if marker && last.as_deref() == Some(b"MN") {
            in_sync += 1;
        }
        // The server closed before it had the whole stream: only after an error line (or a
        // quit, which a mutation may have spelled).
        if !sent_all && !contains(&stream, b"quit") {
            assert!(
                last.as_deref().is_some_and(is_error),
                "closed without an error line (last reply {:?}); {}",
                last.as_deref().map(show),
                what()
            );
        }
        assert_alive(&server, &what);
    }
    eprintln!("mutated streams: {cases} cases, {in_sync} still in sync at the end");
    assert!(
        in_sync * 10 >= cases,
        "too few streams in sync: {in_sync} of {cases}"
    );
    drop(server);
}
