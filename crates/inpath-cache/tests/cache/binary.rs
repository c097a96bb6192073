//! memcached's binary protocol: every opcode and its quiet variant through a raw socket, a
//! pipelined stream split at every byte, malformed headers and bodies (an error status or a
//! close, never a hang), `-B` detection, the same request script to a real memcached started
//! with `-B binary` (when installed), and libmemcached's tools speaking binary (when installed).

use crate::common::*;
use crate::differential::{memcached_binary, spawn_memcached, Memcached};
use inpath_cache::{Protocol, Server};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

// Opcodes.
const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCRQ: u8 = 0x15;
const DECRQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

// Status codes.
const OK: u16 = 0x0000;
const NOT_FOUND: u16 = 0x0001;
const EXISTS: u16 = 0x0002;
const TOO_LARGE: u16 = 0x0003;
const INVALID: u16 = 0x0004;
const NOT_STORED: u16 = 0x0005;
const NON_NUMERIC: u16 = 0x0006;
const UNKNOWN: u16 = 0x0081;

/// A request: header, then extras, key and value.
fn req(op: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut r = vec![0x80, op];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.push(extras.len() as u8);
    r.extend_from_slice(&[0, 0, 0]);
    r.extend_from_slice(&(body as u32).to_be_bytes());
    r.extend_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(&cas.to_be_bytes());
    r.extend_from_slice(extras);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

fn simple(op: u8, key: &[u8]) -> Vec<u8> {
    req(op, key, &[], &[], 0, 0)
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

fn store(op: u8, key: &[u8], flags: u32, value: &[u8], cas: u64) -> Vec<u8> {
    req(op, key, &set_extras(flags, 0), value, 0, cas)
}

fn arith(op: u8, key: &[u8], delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let mut e = delta.to_be_bytes().to_vec();
    e.extend_from_slice(&initial.to_be_bytes());
    e.extend_from_slice(&exptime.to_be_bytes());
    req(op, key, &e, &[], 0, 0)
}

fn touch(op: u8, key: &[u8], exptime: u32) -> Vec<u8> {
    req(op, key, &exptime.to_be_bytes(), &[], 0, 0)
}

/// One response, split into its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resp {
    magic: u8,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Resp {
    /// The response as bytes, its cas zeroed (cas values differ between servers by design).
    fn masked_bytes(&self) -> Vec<u8> {
        let mut r = vec![self.magic, self.opcode];
        r.extend_from_slice(&(self.key.len() as u16).to_be_bytes());
        r.push(self.extras.len() as u8);
        r.push(0);
        r.extend_from_slice(&self.status.to_be_bytes());
        let body = self.extras.len() + self.key.len() + self.value.len();
        r.extend_from_slice(&(body as u32).to_be_bytes());
        r.extend_from_slice(&self.opaque.to_be_bytes());
        r.extend_from_slice(&[0; 8]);
        r.extend_from_slice(&self.extras);
        r.extend_from_slice(&self.key);
        r.extend_from_slice(&self.value);
        r
    }
}

/// Reads one response; `None` when the connection closed first.
fn read_resp(r: &mut impl Read) -> Option<Resp> {
    let mut h = [0u8; 24];
    r.read_exact(&mut h).ok()?;
    let keylen = u16::from_be_bytes([h[2], h[3]]) as usize;
    let extlen = h[4] as usize;
    let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
    assert!(keylen + extlen <= body, "response lengths {h:?}");
    let mut b = vec![0u8; body];
    r.read_exact(&mut b).expect("response body");
    Some(Resp {
        magic: h[0],
        opcode: h[1],
        status: u16::from_be_bytes([h[6], h[7]]),
        opaque: u32::from_be_bytes(h[12..16].try_into().unwrap()),
        cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
        extras: b[..extlen].to_vec(),
        key: b[extlen..extlen + keylen].to_vec(),
        value: b[extlen + keylen..].to_vec(),
    })
}

/// A binary client.
struct Bin {
    s: TcpStream,
    r: std::io::BufReader<TcpStream>,
}

impl Bin {
    fn connect(addr: std::net::SocketAddr) -> Bin {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        Bin {
            r: std::io::BufReader::new(s.try_clone().unwrap()),
            s,
        }
    }
    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }
    fn recv(&mut self) -> Resp {
        let r = read_resp(&mut self.r).expect("a response");
        assert_eq!(r.magic, 0x81);
        r
    }
    fn ask(&mut self, b: &[u8]) -> Resp {
        self.send(b);
        self.recv()
    }
    /// Sends `b` then a Noop; returns every response before the Noop's.
    fn exchange(&mut self, b: &[u8]) -> Vec<Resp> {
        self.send(b);
        self.send(&req(NOOP, &[], &[], &[], 0xfeed_f00d, 0));
        let mut v = Vec::new();
        loop {
            let r = self.recv();
            if r.opcode == NOOP && r.opaque == 0xfeed_f00d {
                return v;
            }
            v.push(r);
        }
    }
    /// Everything the server sends until it closes the connection; panics on a hang.
    fn until_closed(&mut self) -> Vec<u8> {
        let mut rest = Vec::new();
        self.r.read_to_end(&mut rest).expect("closed, not hung");
        rest
    }
}

fn start_with(dir: &std::path::Path, protocol: Protocol) -> Server {
    let mut cfg = config(dir, 12);
    cfg.protocol = protocol;
    Server::start(cfg).expect("server starts")
}

#[test]
fn every_opcode() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Bin::connect(server.local_addr());

    let r = c.ask(&req(NOOP, &[], &[], &[], 0x1234_5678, 0));
    assert_eq!((r.opcode, r.status, r.opaque), (NOOP, OK, 0x1234_5678));
    let r = c.ask(&simple(VERSION, b""));
    assert!(r.value.starts_with(b"1.6"), "{r:?}");

    // Set, get, getk: flags in the extras, the cas of the set on the get.
    let set = c.ask(&req(SET, b"a", &set_extras(7, 0), b"abc", 42, 0));
    assert_eq!((set.opcode, set.status, set.opaque), (SET, OK, 42));
    assert!(set.cas != 0 && set.value.is_empty());
    let g = c.ask(&simple(GET, b"a"));
    assert_eq!((g.status, g.cas), (OK, set.cas));
    assert_eq!(g.extras, 7u32.to_be_bytes());
    assert!(g.key.is_empty());
    assert_eq!(g.value, b"abc");
    let gk = c.ask(&simple(GETK, b"a"));
    assert_eq!(
        (gk.key.as_slice(), gk.value.as_slice()),
        (&b"a"[..], &b"abc"[..])
    );
    let miss = c.ask(&simple(GET, b"nope"));
    assert_eq!(
        (miss.status, miss.value.as_slice()),
        (NOT_FOUND, &b"Not found"[..])
    );
    let miss = c.ask(&simple(GETK, b"nope"));
    assert_eq!(
        (miss.status, miss.key.as_slice()),
        (NOT_FOUND, &b"nope"[..])
    );
    assert!(miss.value.is_empty());

    // Cas on set: a wrong cas is refused, the right one stores; a cas on a miss is not found.
    assert_eq!(
        c.ask(&store(SET, b"a", 0, b"x", set.cas + 1000)).status,
        EXISTS
    );
    let again = c.ask(&store(SET, b"a", 0, b"x", set.cas));
    assert_eq!(again.status, OK);
    assert_ne!(again.cas, set.cas);
    assert_eq!(c.ask(&store(SET, b"none", 0, b"x", 5)).status, NOT_FOUND);
    // Add and replace, with memcached's statuses.
    assert_eq!(c.ask(&store(ADD, b"a", 0, b"y", 0)).status, EXISTS);
    assert_eq!(c.ask(&store(ADD, b"b", 3, b"bb", 0)).status, OK);
    assert_eq!(c.ask(&store(REPLACE, b"zz", 0, b"y", 0)).status, NOT_FOUND);
    assert_eq!(c.ask(&store(REPLACE, b"b", 4, b"BB", 0)).status, OK);
    // Append and prepend keep the flags; on a miss they are not stored.
    assert_eq!(c.ask(&req(APPEND, b"b", &[], b">>", 0, 0)).status, OK);
    assert_eq!(c.ask(&req(PREPEND, b"b", &[], b"<<", 0, 0)).status, OK);
    assert_eq!(
        c.ask(&req(APPEND, b"none", &[], b"x", 0, 0)).status,
        NOT_STORED
    );
    let g = c.ask(&simple(GET, b"b"));
    assert_eq!(
        (g.value.as_slice(), g.extras.as_slice()),
        (&b"<<BB>>"[..], &4u32.to_be_bytes()[..])
    );
    assert_eq!(
        c.ask(&req(APPEND, b"b", &[], b"!", 0, g.cas + 99)).status,
        EXISTS
    );
    assert_eq!(c.ask(&req(APPEND, b"b", &[], b"!", 0, g.cas)).status, OK);

    // Incr and decr: a miss creates the initial value unless the expiry is 0xffffffff.
    let r = c.ask(&arith(INCR, b"n", 1, 10, 0xffff_ffff));
    assert_eq!(r.status, NOT_FOUND);
    let r = c.ask(&arith(INCR, b"n", 1, 10, 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (OK, &10u64.to_be_bytes()[..])
    );
    assert!(r.cas != 0);
    let r = c.ask(&arith(INCR, b"n", 5, 0, 0));
    assert_eq!(r.value, 15u64.to_be_bytes());
    let r = c.ask(&arith(DECR, b"n", 100, 0, 0));
    assert_eq!(r.value, 0u64.to_be_bytes(), "decr stops at 0");
    let r = c.ask(&arith(INCR, b"n", u64::MAX, 0, 0));
    assert_eq!(r.value, u64::MAX.to_be_bytes());
    let r = c.ask(&arith(INCR, b"n", 2, 0, 0));
    assert_eq!(r.value, 1u64.to_be_bytes(), "incr wraps at 2^64");
    assert_eq!(c.ask(&simple(GET, b"n")).value, b"1");
    let r = c.ask(&arith(INCR, b"b", 1, 0, 0));
    assert_eq!(r.status, NON_NUMERIC);
    assert_eq!(r.value, b"Non-numeric server-side value for incr or decr");
    let mut wrong_cas = arith(INCR, b"n", 1, 0, 0);
    wrong_cas[16..24].copy_from_slice(&12345u64.to_be_bytes());
    assert_eq!(c.ask(&wrong_cas).status, EXISTS);

    // Touch answers the flags only; GAT and GATK the value (and key).
    let t = c.ask(&touch(TOUCH, b"b", 100));
    assert_eq!(
        (t.status, t.extras.as_slice()),
        (OK, &4u32.to_be_bytes()[..])
    );
    assert!(t.key.is_empty() && t.value.is_empty());
    assert_eq!(c.ask(&touch(TOUCH, b"nope", 100)).status, NOT_FOUND);
    let g = c.ask(&touch(GAT, b"b", 100));
    assert_eq!(g.value, b"<<BB>>!");
    assert!(g.key.is_empty());
    let g = c.ask(&touch(GATK, b"b", 0));
    assert_eq!(
        (g.key.as_slice(), g.value.as_slice()),
        (&b"b"[..], &b"<<BB>>!"[..])
    );
    assert_eq!(c.ask(&touch(GAT, b"nope", 0)).status, NOT_FOUND);
    let m = c.ask(&touch(GATK, b"nope", 0));
    assert_eq!((m.status, m.key.as_slice()), (NOT_FOUND, &b"nope"[..]));
    // A touch into the past expires the item.
    assert_eq!(c.ask(&touch(TOUCH, b"b", u32::MAX >> 8)).status, OK);
    assert_eq!(c.ask(&simple(GET, b"b")).status, NOT_FOUND);

    // Delete, with and without a cas.
    let g = c.ask(&simple(GET, b"a"));
    assert_eq!(
        c.ask(&req(DELETE, b"a", &[], &[], 0, g.cas + 1)).status,
        EXISTS
    );
    assert_eq!(c.ask(&req(DELETE, b"a", &[], &[], 0, g.cas)).status, OK);
    assert_eq!(c.ask(&simple(DELETE, b"a")).status, NOT_FOUND);

    // Stat: one packet per statistic, then an empty terminator.
    c.send(&simple(STAT, b""));
    let mut names = Vec::new();
    loop {
        let r = c.recv();
        assert_eq!((r.opcode, r.status), (STAT, OK));
        if r.key.is_empty() {
            assert!(r.value.is_empty());
            break;
        }
        names.push(String::from_utf8(r.key).unwrap());
    }
    for k in ["pid", "curr_items", "cmd_get", "incr_hits"] {
        assert!(names.iter().any(|n| n == k), "stat {k} missing: {names:?}");
    }
    let s = c.exchange(&simple(STAT, b"settings"));
    assert!(s
        .iter()
        .any(|r| r.key == b"item_size_max" && r.value == b"1048576"));
    assert!(s.last().unwrap().key.is_empty());
    let s = c.exchange(&simple(STAT, b"reset"));
    assert_eq!(s.len(), 1);
    assert_eq!(c.ask(&simple(STAT, b"bogus")).status, NOT_FOUND);

    // Verbosity is taken; flush empties the cache, FlushQ says nothing.
    let v = c.ask(&req(VERBOSITY, &[], &1u32.to_be_bytes(), &[], 0, 0));
    assert_eq!(v.status, OK);
    c.ask(&store(SET, b"f", 0, b"1", 0));
    assert_eq!(c.ask(&simple(FLUSH, b"")).status, OK);
    assert_eq!(c.ask(&simple(GET, b"f")).status, NOT_FOUND);
    c.ask(&store(SET, b"f", 0, b"1", 0));
    assert!(c.exchange(&simple(FLUSHQ, b"")).is_empty());
    assert_eq!(c.ask(&simple(GET, b"f")).status, NOT_FOUND);
    // A flush with a delay flushes later, not now.
    c.ask(&store(SET, b"f", 0, b"1", 0));
    assert_eq!(
        c.ask(&req(FLUSH, &[], &100u32.to_be_bytes(), &[], 0, 0))
            .status,
        OK
    );
    assert_eq!(c.ask(&simple(GET, b"f")).status, OK);

    // SASL and unknown opcodes: "unknown command", the body skipped, the connection kept.
    let r = c.ask(&simple(SASL_LIST, b""));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (UNKNOWN, &b"Unknown command"[..])
    );
    assert_eq!(
        c.ask(&req(SASL_AUTH, b"PLAIN", &[], b"\0u\0p", 0, 0))
            .status,
        UNKNOWN
    );
    assert_eq!(
        c.ask(&req(0x5f, b"key", &[1, 2], b"value", 0, 0)).status,
        UNKNOWN
    );
    assert_eq!(c.ask(&simple(GET, b"f")).status, OK);

    // Quit answers then closes; QuitQ just closes.
    let q = c.ask(&simple(QUIT, b""));
    assert_eq!((q.opcode, q.status), (QUIT, OK));
    assert!(c.until_closed().is_empty());
    let mut c = Bin::connect(server.local_addr());
    c.send(&simple(QUITQ, b""));
    assert!(c.until_closed().is_empty());
    server.stop().unwrap();
}

#[test]
fn quiet_variants_answer_only_errors_and_hits() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Bin::connect(server.local_addr());
    let mut script = Vec::new();
    script.extend(req(SETQ, b"k", &set_extras(1, 0), b"v", 1, 0));
    script.extend(req(ADDQ, b"k", &set_extras(0, 0), b"v", 2, 0)); // exists: answered
    script.extend(req(ADDQ, b"k2", &set_extras(0, 0), b"2", 3, 0));
    script.extend(req(REPLACEQ, b"k2", &set_extras(0, 0), b"3", 4, 0));
    script.extend(req(REPLACEQ, b"none", &set_extras(0, 0), b"3", 5, 0)); // answered
    script.extend(req(APPENDQ, b"k", &[], b"w", 6, 0));
    script.extend(req(PREPENDQ, b"k", &[], b"u", 7, 0));
    script.extend(req(APPENDQ, b"none", &[], b"u", 8, 0)); // answered
    script.extend(req(GETQ, b"none", &[], &[], 9, 0));
    script.extend(req(GETKQ, b"none", &[], &[], 10, 0));
    script.extend(req(GETQ, b"k", &[], &[], 11, 0)); // hit: answered
    script.extend(req(GETKQ, b"k2", &[], &[], 12, 0)); // hit: answered
    let mut incr = arith(INCRQ, b"k2", 4, 0, 0);
    incr[12..16].copy_from_slice(&13u32.to_be_bytes());
    script.extend(incr);
    let mut decr = arith(DECRQ, b"k", 1, 0, 0); // non-numeric: answered
    decr[12..16].copy_from_slice(&14u32.to_be_bytes());
    script.extend(decr);
    script.extend(req(GATQ, b"none", &0u32.to_be_bytes(), &[], 15, 0));
    script.extend(req(GATKQ, b"k2", &0u32.to_be_bytes(), &[], 16, 0)); // hit: answered
    script.extend(req(DELETEQ, b"k", &[], &[], 17, 0));
    script.extend(req(DELETEQ, b"k", &[], &[], 18, 0)); // miss: answered
    let got: Vec<(u8, u16, u32)> = c
        .exchange(&script)
        .iter()
        .map(|r| (r.opcode, r.status, r.opaque))
        .collect();
    assert_eq!(
        got,
        [
            (ADDQ, EXISTS, 2),
            (REPLACEQ, NOT_FOUND, 5),
            (APPENDQ, NOT_STORED, 8),
            (GETQ, OK, 11),
            (GETKQ, OK, 12),
            (DECRQ, NON_NUMERIC, 14),
            (GATKQ, OK, 16),
            (DELETEQ, NOT_FOUND, 18),
        ]
    );
    let g = c.ask(&simple(GET, b"k2"));
    assert_eq!(g.value, b"7");
    server.stop().unwrap();
}

/// A pipelined stream that leaves the cache as it found it (it starts with a flush).
fn pipeline() -> Vec<u8> {
    let mut s = Vec::new();
    s.extend(simple(FLUSH, b""));
    s.extend(req(SET, b"key", &set_extras(9, 0), b"value", 1, 0));
    s.extend(req(SETQ, b"q", &set_extras(0, 0), b"12", 2, 0));
    s.extend(simple(GETK, b"key"));
    s.extend(simple(GETQ, b"missing"));
    s.extend(arith(INCR, b"q", 30, 0, 0));
    s.extend(req(APPEND, b"key", &[], b"++", 3, 0));
    s.extend(touch(GAT, b"key", 0));
    s.extend(simple(VERSION, b""));
    s.extend(req(0x77, b"k", &[], b"junk", 4, 0));
    s.extend(simple(DELETE, b"q"));
    s.extend(simple(GET, b"q"));
    s.extend(simple(NOOP, b""));
    s
}

/// Responses the pipeline gets: set, getk, incr, append, gat, version, unknown, delete, get,
/// noop (flush is answered too).
const PIPELINE_REPLIES: usize = 11;

#[test]
fn a_pipeline_split_at_every_byte_gets_the_same_replies() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let stream = pipeline();
    let read_all = |c: &mut Bin| -> Vec<Vec<u8>> {
        (0..PIPELINE_REPLIES)
            .map(|_| c.recv().masked_bytes())
            .collect()
    };
    let mut whole = Bin::connect(server.local_addr());
    whole.send(&stream);
    let expected = read_all(&mut whole);
    assert_eq!(expected.last().unwrap()[1], NOOP);
    drop(whole);
    let read = &server.store().counters.bytes_read;
    for at in 1..stream.len() {
        let mut c = Bin::connect(server.local_addr());
        let before = read.load(Relaxed);
        c.send(&stream[..at]);
        // The server has read the first part before the second is sent: the split is real.
        let deadline = Instant::now() + Duration::from_secs(10);
        while read.load(Relaxed) < before + at as u64 {
            assert!(
                Instant::now() < deadline,
                "server did not read the first part"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        c.send(&stream[at..]);
        assert_eq!(read_all(&mut c), expected, "split at byte {at}");
    }
    server.stop().unwrap();
}

#[test]
fn malformed_requests_get_an_error_or_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Binary);
    let addr = server.local_addr();
    let closes = |bytes: &[u8], status: Option<u16>| {
        let mut c = Bin::connect(addr);
        c.send(bytes);
        let rest = c.until_closed();
        match status {
            None => assert!(rest.is_empty(), "{rest:?}"),
            Some(st) => {
                let r = read_resp(&mut rest.as_slice()).expect("a reply before the close");
                assert_eq!(r.status, st, "{bytes:?}");
                assert_eq!(rest.len(), r.masked_bytes().len(), "only one reply");
            }
        }
    };
    // Bad magic, a response sent as a request, text on a binary-only server.
    closes(&[0x81; 24], None);
    closes(b"get a\r\n", None);
    let mut bad = simple(NOOP, b"");
    bad[0] = 0x42;
    closes(&bad, None);
    // Key longer than the body.
    let mut r = simple(GET, b"abc");
    r[8..12].copy_from_slice(&2u32.to_be_bytes());
    closes(&r, Some(UNKNOWN));
    // Extras plus key longer than the body.
    let mut r = store(SET, b"abc", 0, b"", 0);
    r[8..12].copy_from_slice(&9u32.to_be_bytes());
    closes(&r, Some(UNKNOWN));
    // Extras of the wrong size, a missing key, a body where none belongs.
    closes(&req(SET, b"k", &[0; 4], b"v", 0, 0), Some(INVALID));
    closes(&req(GET, b"k", &[0; 4], &[], 0, 0), Some(INVALID));
    closes(&req(GET, b"", &[], &[], 0, 0), Some(INVALID));
    closes(&req(GET, b"k", &[], b"v", 0, 0), Some(INVALID));
    closes(&req(INCR, b"k", &[0; 8], &[], 0, 0), Some(INVALID));
    closes(&req(NOOP, b"k", &[], &[], 0, 0), Some(INVALID));
    closes(&req(VERSION, b"", &[], b"v", 0, 0), Some(INVALID));
    closes(&req(FLUSH, b"", &[0; 3], &[], 0, 0), Some(INVALID));
    closes(&req(TOUCH, b"k", &[], &[], 0, 0), Some(INVALID));
    closes(&req(DELETE, b"k", &[0; 8], &[], 0, 0), Some(INVALID));
    closes(&req(SASL_LIST, b"k", &[], &[], 0, 0), Some(INVALID));
    // A key over 250 bytes.
    closes(&simple(GET, &[b'k'; 251]), Some(INVALID));
    // A body over the protocol's upper limit, without sending it.
    let mut r = simple(GET, b"k");
    r[8..12].copy_from_slice(&(u32::MAX).to_be_bytes());
    r.truncate(24);
    closes(&r, Some(INVALID));

    // A value over the item limit: "too large", swallowed, the old value gone, still served.
    let mut c = Bin::connect(addr);
    assert_eq!(c.ask(&store(SET, b"big", 0, b"small", 0)).status, OK);
    let big = vec![b'x'; (1 << 20) + 1];
    let r = c.ask(&store(SET, b"big", 0, &big, 0));
    assert_eq!(
        (r.status, r.value.as_slice()),
        (TOO_LARGE, &b"Too large."[..])
    );
    assert_eq!(c.ask(&simple(GET, b"big")).status, NOT_FOUND);
    assert_eq!(
        c.ask(&req(APPEND, b"big", &[], &big, 0, 0)).status,
        TOO_LARGE
    );
    // Junk behind a Stat key is skipped, not read as a request.
    let s = c.exchange(&req(STAT, b"reset", &[], b"\x80junk", 0, 0));
    assert_eq!(s.len(), 1);
    assert_eq!(c.ask(&simple(NOOP, b"")).status, OK);

    // Random headers and bodies, then the client's end closed: the server answers or closes,
    // never hangs or dies.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let mut c = Bin::connect(addr);
        let mut h = [0u8; 24];
        rng.fill(&mut h[..]);
        h[0] = 0x80;
        h[1] = rng.gen_range(0..0x30);
        h[2] = 0;
        h[3] = rng.gen_range(0..20);
        h[4] = [0, 4, 8, 20, rng.gen()][rng.gen_range(0..5)];
        let len = rng.gen_range(0..64u32);
        h[8..12].copy_from_slice(&len.to_be_bytes());
        let mut bytes = h.to_vec();
        let n = rng.gen_range(0..80);
        bytes.extend((0..n).map(|_| rng.gen::<u8>()));
        c.send(&bytes);
        let _ = c.s.shutdown(Shutdown::Write);
        c.until_closed();
    }
    let mut c = Bin::connect(addr);
    assert_eq!(c.ask(&simple(NOOP, b"")).status, OK);
    server.stop().unwrap();
}

#[test]
fn protocol_detection_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    // Auto (the default): each connection by its first byte.
    let server = start(dir.path());
    let mut text = Conn::new(&server);
    let mut bin = Bin::connect(server.local_addr());
    assert_eq!(text.set("t", b"x"), "STORED");
    assert_eq!(bin.ask(&simple(GET, b"t")).value, b"x");
    assert_eq!(text.ask("get nothing\r\n", 1), ["END"]);
    server.stop().unwrap();
    drop((text, bin));

    // Ascii only: binary bytes are read as text, as memcached reads them (the Noop's opcode
    // 0x0a ends a line: an unknown command).
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Ascii);
    let mut c = Conn::new(&server);
    c.send(&simple(NOOP, b""));
    assert_eq!(c.line(), "ERROR");
    server.stop().unwrap();

    // Binary only: a text connection is closed without a reply.
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Binary);
    let mut c = Bin::connect(server.local_addr());
    c.send(b"version\r\n");
    assert!(c.until_closed().is_empty());
    let mut c = Bin::connect(server.local_addr());
    assert_eq!(c.ask(&simple(NOOP, b"")).status, OK);
    server.stop().unwrap();
}

/// Starts memcached `-B binary`; a binary Version reply that is not inpath's proves it.
fn start_memcached_binary(bin: &str) -> (Memcached, std::net::SocketAddr) {
    spawn_memcached(bin, &["-B", "binary"], |s| {
        let addr = s.peer_addr().ok()?;
        let mut c = Bin {
            r: std::io::BufReader::new(s.try_clone().unwrap()),
            s,
        };
        c.send(&simple(VERSION, b""));
        match read_resp(&mut c.r) {
            Some(r) if r.opcode == VERSION && !r.value.windows(6).any(|w| w == b"inpath") => {
                Some(addr)
            }
            _ => None,
        }
    })
}

/// The differential script: each entry is sent, then a Noop, and every reply up to the Noop's
/// is compared byte for byte, cas masked.
///
/// Left out because they differ by design:
/// - Version (memcached says "1.6.18", inpath "1.6.18-inpath-cache-…"); Stat without a group,
///   `settings`, `items` and `slabs` (other statistics; `reset`, `sizes`, `detail dump`, unknown
///   groups are in the script and agree).
/// - Verbosity: memcached 1.6 answers "unknown command" and then skips 4 bytes too many (it
///   swallows the whole body length after reading the extras), losing the next request;
///   inpath accepts it with status 0, as its text `verbosity` answers OK.
/// - Unknown opcodes with extras or a key: memcached skips the body length again after the
///   key, which eats part of the next request; inpath skips exactly the body. Only unknown
///   requests with a bare value (where the two agree) are in the script.
/// - The size limit: memcached counts its item header and the key against `-I`, inpath only
///   the value against `item_max`; the script stays far from the limit on either side.
/// - Reading a counter that incr/decr made shorter: memcached rewrites it in place, padded
///   with spaces ("1" after "18446744073709551615" reads as "1" and 19 spaces); inpath stores
///   the digits alone (the text protocol's rule, the store's). The script reads counters only
///   after they grew.
/// - Stat "detail" with no subcommand: memcached compares the bytes after the key, left over
///   from earlier requests, so its answer depends on them; inpath answers "not found".
/// - A text first byte on a `-B binary` connection: memcached waits for 24 bytes before it
///   closes, inpath closes at once (both close without a reply).
fn binary_script() -> Vec<Vec<u8>> {
    let mut s = vec![
        simple(FLUSH, b""),
        simple(NOOP, b""),
        req(SET, b"a", &set_extras(5, 0), b"abc", 11, 0),
        simple(GET, b"a"),
        simple(GETK, b"a"),
        simple(GET, b"b"),
        simple(GETK, b"b"),
        simple(GETQ, b"b"),
        simple(GETKQ, b"b"),
        simple(GETQ, b"a"),
        simple(GETKQ, b"a"),
        req(APPEND, b"a", &[], b"de", 12, 0),
        req(PREPEND, b"a", &[], b"z", 13, 0),
        req(APPENDQ, b"a", &[], b"!", 14, 0),
        req(PREPENDQ, b"nope", &[], b"!", 15, 0),
        req(APPEND, b"nope", &[], b"!", 0, 0),
        req(APPEND, b"a", &[], b"!", 0, 999_999_999),
        req(APPEND, b"nope", &[], b"!", 0, 999_999_999),
        simple(GET, b"a"),
        arith(INCR, b"n", 1, 0, 0xffff_ffff),
        arith(INCR, b"n", 1, 7, 0),
        arith(INCR, b"n", 5, 0, 0),
        simple(GET, b"n"),
        arith(DECR, b"n", 100, 0, 0),
        arith(INCR, b"n", u64::MAX, 0, 0),
        arith(INCR, b"n", 2, 0, 0),
        arith(DECR, b"m", 1, 20, 0),
        arith(DECRQ, b"m", 1, 0, 0),
        arith(INCRQ, b"missing", 1, 0, 0xffff_ffff),
        arith(INCR, b"a", 1, 0, 0),
        req(INCR, b"n", &[0; 20], &[], 0, 999_999_999),
        touch(TOUCH, b"a", 100),
        touch(TOUCH, b"nope", 100),
        touch(GAT, b"a", 100),
        touch(GATK, b"a", 0),
        touch(GATQ, b"nope", 0),
        touch(GATKQ, b"nope", 0),
        touch(GATKQ, b"a", 0),
        touch(GAT, b"nope", 0),
        touch(GATK, b"nope", 0),
        simple(DELETE, b"a"),
        simple(DELETE, b"a"),
        simple(DELETEQ, b"n"),
        simple(DELETEQ, b"n"),
        req(DELETE, b"m", &[], &[], 0, 999_999_999),
        store(ADD, b"x", 1, b"q", 0),
        store(ADD, b"x", 1, b"q", 0),
        store(ADDQ, b"x", 1, b"q", 0),
        store(ADDQ, b"y", 1, b"q", 0),
        store(REPLACE, b"z", 0, b"q", 0),
        store(REPLACEQ, b"z", 0, b"q", 0),
        store(REPLACE, b"x", 9, b"qq", 0),
        store(REPLACEQ, b"y", 8, b"yy", 0),
        simple(GET, b"x"),
        simple(GET, b"y"),
        store(SET, b"x", 0, b"w", 999_999_999),
        store(SET, b"nope", 0, b"w", 999_999_999),
        store(ADD, b"x", 0, b"w", 999_999_999),
        store(REPLACE, b"nope", 0, b"w", 999_999_999),
        store(SETQ, b"q", 3, b"quiet", 0),
        simple(GET, b"q"),
        req(SET, b"exp", &set_extras(0, u32::MAX), b"gone", 0, 0),
        simple(GET, b"exp"),
        req(SET, b"empty", &set_extras(0, 0), b"", 0, 0),
        simple(GETK, b"empty"),
        simple(STAT, b"bogus"),
        simple(STAT, b"reset"),
        simple(STAT, b"sizes"),
        simple(STAT, b"detail dump"),
        simple(STAT, b"detail off"),
        simple(SASL_LIST, b""),
        req(SASL_AUTH, b"PLAIN", &[], b"\0user\0pass", 0, 0),
        req(0x1f, b"", &[], b"xyz", 0, 0),
        req(0x7f, b"", &[], b"", 0, 0),
        simple(FLUSHQ, b""),
        simple(GET, b"x"),
        req(FLUSH, &[], &0u32.to_be_bytes(), &[], 0, 0),
    ];
    let mut bin = (0..=255u8).collect::<Vec<u8>>();
    bin.extend_from_slice(b"\r\n\0");
    s.push(store(SET, b"bin", 0xdead_beef, &bin, 0));
    s.push(simple(GETK, b"bin"));
    s.push(store(SET, &[b'k'; 250], 0, b"x", 0));
    s.push(simple(GETK, &[b'k'; 250]));
    s.push(store(SET, b"big", 0, b"small", 0));
    s.push(store(SET, b"big", 0, &vec![b'x'; 2 << 20], 0));
    s.push(simple(GET, b"big"));
    s.push(store(SET, b"mid", 0, &vec![b'm'; 512 << 10], 0));
    s.push(simple(GET, b"mid"));
    // A pipeline in one entry.
    let mut p = Vec::new();
    for i in 0..20u32 {
        p.extend(req(
            SETQ,
            format!("p{i}").as_bytes(),
            &set_extras(i, 0),
            b"v",
            i,
            0,
        ));
        p.extend(req(GETKQ, format!("p{}", i / 2).as_bytes(), &[], &[], i, 0));
    }
    s.push(p);
    s
}

/// Requests that end the connection: each goes on a fresh connection to both servers.
fn closing_requests() -> Vec<Vec<u8>> {
    let mut key_over_body = simple(GET, b"abc");
    key_over_body[8..12].copy_from_slice(&2u32.to_be_bytes());
    vec![
        simple(QUIT, b""),
        [simple(NOOP, b""), simple(QUITQ, b"")].concat(),
        key_over_body,
        req(SET, b"k", &[0; 4], b"v", 0, 0),
        req(GET, b"", &[], &[], 0, 0),
        req(INCR, b"k", &[0; 8], &[], 0, 0),
        simple(GET, &[b'k'; 251]),
        req(0x5f, &[b'k'; 251], &[], b"v", 0, 0),
        [simple(NOOP, b""), vec![0x81; 24]].concat(),
    ]
}

#[test]
fn same_binary_replies_as_memcached() {
    let Some(bin) = memcached_binary() else {
        eprintln!("skipped: memcached is not installed (scripts/apt-packages.txt lists it)");
        return;
    };
    let (_memcached, peer_addr) = start_memcached_binary(&bin);
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Binary);
    let mut ours = Bin::connect(server.local_addr());
    let mut peer = Bin::connect(peer_addr);
    let masked = |v: Vec<Resp>| -> Vec<Vec<u8>> { v.iter().map(Resp::masked_bytes).collect() };
    let mut differ = Vec::new();
    for (i, r) in binary_script().into_iter().enumerate() {
        let a = masked(ours.exchange(&r));
        let b = masked(peer.exchange(&r));
        if a != b {
            differ.push(format!(
                "#{i} {:02x?}\n  inpath:    {a:02x?}\n  memcached: {b:02x?}",
                &r[..r.len().min(40)]
            ));
        }
    }
    for (i, r) in closing_requests().into_iter().enumerate() {
        let mut a = Bin::connect(server.local_addr());
        let mut b = Bin::connect(peer_addr);
        a.send(&r);
        b.send(&r);
        let (ra, rb) = (a.until_closed(), b.until_closed());
        let split = |mut bytes: &[u8]| -> Vec<Vec<u8>> {
            std::iter::from_fn(|| read_resp(&mut bytes).map(|r| r.masked_bytes())).collect()
        };
        let (ra, rb) = (split(&ra), split(&rb));
        if ra != rb {
            differ.push(format!(
                "closing #{i} {r:02x?}\n  inpath:    {ra:02x?}\n  memcached: {rb:02x?}"
            ));
        }
    }
    assert!(differ.is_empty(), "replies differ:\n{}", differ.join("\n"));
    server.stop().unwrap();
}

fn tool(name: &str) -> Option<String> {
    ["/usr/bin", "/usr/local/bin"]
        .iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| std::path::Path::new(p).exists())
}

#[test]
fn libmemcached_tools_speak_binary_to_it() {
    let (Some(memccp), Some(memccat)) = (tool("memccp"), tool("memccat")) else {
        eprintln!(
            "skipped: libmemcached's tools are not installed \
             (scripts/apt-packages.txt lists libmemcached-tools)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Binary);
    let servers = format!("--servers={}", server.local_addr());
    let files = tempfile::tempdir().unwrap();
    let mut names = Vec::new();
    for (i, len) in [0usize, 1, 1000, 70_000, 900_000].into_iter().enumerate() {
        let name = format!("file{i}.bin");
        let data = value(&name, i as u64, len);
        std::fs::write(files.path().join(&name), &data).unwrap();
        names.push((name, data));
    }
    let run = |cmd: &mut Command| -> std::process::Output {
        let out = cmd.stdin(Stdio::null()).output().expect("tool runs");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let mut cp = Command::new(&memccp);
    cp.arg("--binary").arg(&servers);
    for (n, _) in &names {
        cp.arg(files.path().join(n));
    }
    run(&mut cp);
    for (n, data) in &names {
        let out = run(Command::new(&memccat).arg("--binary").arg(&servers).arg(n));
        // memccat ends each value with a newline of its own.
        let mut want = data.clone();
        want.push(b'\n');
        assert!(out.stdout == want, "{n}: {} bytes back", out.stdout.len());
    }
    let miss = Command::new(&memccat)
        .arg("--binary")
        .arg(&servers)
        .arg("no-such-key")
        .output()
        .unwrap();
    assert!(!miss.status.success(), "memccat of a missing key fails");

    // libmemcached's own conformance test of the binary protocol.
    if let Some(capable) = tool("memccapable") {
        let a = server.local_addr();
        let out = Command::new(capable)
            .args(["-h", &a.ip().to_string(), "-p", &a.port().to_string()])
            .args(["-b", "-t", "10"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("All tests passed"),
            "memccapable -b:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A short load: both kinds of test, two threads.
    if let Some(slap) = tool("memcslap") {
        for test in ["set", "get"] {
            run(Command::new(&slap).arg("--binary").arg(&servers).args([
                "--concurrency=2",
                "--execute-number=500",
                &format!("--test={test}"),
            ]));
        }
    }
    server.stop().unwrap();
}

/// Mutated binary streams (the pipeline above, mutated by the project's fuzzer, sent in random
/// pieces): every response the server sends is a well-formed binary response, the server never
/// panics or stalls, and it serves a fresh connection after each case.
#[test]
fn mutated_binary_streams_never_break_the_server() {
    use crate::fuzz::{exchange, random_cuts, seed, watch_server_panics};
    use inpath_testkit::fuzz::Mutator;
    watch_server_panics();
    let dir = tempfile::tempdir().unwrap();
    let server = start_with(dir.path(), Protocol::Binary);
    let seed = seed(0xB1_4A_27);
    let mut m = Mutator::new(seed);
    let base = pipeline();
    let others: Vec<Vec<u8>> = vec![
        simple(NOOP, b""),
        req(SET, b"k", &set_extras(1, 0), &[0xFF; 300], 9, 0),
        arith(DECR, b"n", 1, 5, 0),
    ];
    let others: Vec<&[u8]> = others.iter().map(|v| v.as_slice()).collect();
    for case in 0..300 {
        let stream = m.mutate(&base, &others);
        let cuts = random_cuts(&mut m, stream.len());
        let what = || format!("seed {seed:#x} case {case}");
        let (got, _) = exchange(server.local_addr(), &stream, &cuts)
            .unwrap_or_else(|e| panic!("{e}; {}", what()));
        // Every response is whole: magic 0x81, lengths that fit, until the bytes end.
        let mut r = &got[..];
        while !r.is_empty() {
            assert!(
                r.len() >= 24 && r[0] == 0x81,
                "torn or bad response; {}",
                what()
            );
            let body = u32::from_be_bytes(r[8..12].try_into().unwrap()) as usize;
            assert!(r.len() >= 24 + body, "torn response body; {}", what());
            r = &r[24 + body..];
        }
        if case % 50 == 0 {
            assert_alive_binary(&server, &what);
        }
    }
    assert_alive_binary(&server, &|| format!("seed {seed:#x} end"));
    server.stop().unwrap();
}

/// A fresh binary connection gets its version and no server thread panicked.
fn assert_alive_binary(server: &Server, what: &dyn Fn() -> String) {
    assert_eq!(
        crate::fuzz::server_panics(),
        0,
        "a server thread panicked: {}",
        what()
    );
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&simple(VERSION, b"")).unwrap();
    let r = read_resp(&mut s).unwrap_or_else(|| panic!("no version reply; {}", what()));
    assert_eq!(r.opcode, VERSION, "{}", what());
}
