//! The memcached protocol through raw sockets: every command, pipelining, split segments,
//! noreply, expiry, cas races, bad input, many connections.

use crate::common::*;
use std::io::Write;
use std::time::Duration;

#[test]
fn classic_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(c.set("a", b"abc"), "STORED");
    assert_eq!(
        c.ask("get a missing a\r\n", 5),
        ["VALUE a 0 3", "abc", "VALUE a 0 3", "abc", "END"]
    );
    let g = c.ask("gets a\r\n", 3);
    let cas: u64 = g[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(
        c.ask(&format!("cas a 7 0 1 {}\r\nx\r\n", cas + 100), 1),
        ["EXISTS"]
    );
    assert_eq!(c.ask(&format!("cas a 7 0 1 {cas}\r\nx\r\n"), 1), ["STORED"]);
    assert_eq!(c.ask("cas nope 0 0 1 1\r\nx\r\n", 1), ["NOT_FOUND"]);
    assert_eq!(c.ask("get a\r\n", 3), ["VALUE a 7 1", "x", "END"]);
    assert_eq!(
        c.ask("add a 0 0 1\r\ny\r\nadd b 3 0 1\r\ny\r\n", 2),
        ["NOT_STORED", "STORED"]
    );
    assert_eq!(
        c.ask("replace zz 0 0 1\r\ny\r\nreplace b 4 0 2\r\nyy\r\n", 2),
        ["NOT_STORED", "STORED"]
    );
    assert_eq!(
        c.ask(
            "append b 9 9 2\r\n>>\r\nprepend b 9 9 2\r\n<<\r\nappend none 0 0 1\r\nx\r\n",
            3
        ),
        ["STORED", "STORED", "NOT_STORED"]
    );
    assert_eq!(c.ask("get b\r\n", 3), ["VALUE b 4 6", "<<yy>>", "END"]);
    assert_eq!(c.ask("incr n 1\r\n", 1), ["NOT_FOUND"]);
    c.set("n", b"10");
    assert_eq!(
        c.ask(
            "incr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\n",
            3
        ),
        ["15", "0", "18446744073709551615"]
    );
    assert_eq!(c.ask("incr n 1\r\n", 1), ["0"], "incr wraps at 2^64");
    assert_eq!(
        c.ask("incr b 1\r\n", 1),
        ["CLIENT_ERROR cannot increment or decrement non-numeric value"]
    );
    assert_eq!(
        c.ask("touch b 100\r\ntouch nope 100\r\n", 2),
        ["TOUCHED", "NOT_FOUND"]
    );
    assert_eq!(
        c.ask("gat 100 b nope\r\n", 3),
        ["VALUE b 4 6", "<<yy>>", "END"]
    );
    let g = c.ask("gats 0 b\r\n", 3);
    assert!(g[0].starts_with("VALUE b 4 6 "), "{g:?}");
    assert_eq!(
        c.ask("delete b\r\ndelete b\r\ndelete a 0\r\n", 3),
        ["DELETED", "NOT_FOUND", "DELETED"]
    );
    assert_eq!(c.ask("get a b\r\n", 1), ["END"]);
    assert!(c.ask("version\r\n", 1)[0].starts_with("VERSION 1.6"));
    assert_eq!(
        c.ask("verbosity 1\r\nverbosity 1 noreply\r\nmn\r\n", 2),
        ["OK", "MN"]
    );
    c.set("f", b"1");
    assert_eq!(c.ask("flush_all\r\nget f\r\n", 2), ["OK", "END"]);
    let s = c.stats();
    for k in [
        "pid",
        "uptime",
        "curr_items",
        "total_items",
        "get_hits",
        "get_misses",
        "evictions",
        "bytes",
        "limit_maxbytes",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "flash_reads",
        "flash_writes",
        "flash_bytes",
        "index_bytes",
        "flash_direct_io",
    ] {
        assert!(s.contains_key(k), "stats lacks {k}");
    }
    assert_eq!(s["curr_items"], "0");
    c.send(b"quit\r\n");
    let mut rest = Vec::new();
    assert_eq!(
        std::io::Read::read_to_end(&mut c.r, &mut rest).unwrap(),
        0,
        "quit closes"
    );
    server.stop().unwrap();
}

#[test]
fn meta_commands() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(
        c.ask("ms m 2 T0 F5 c\r\nhi\r\n", 1)[0].split(' ').next(),
        Some("HD")
    );
    let r = c.ask("mg m v f k s t O77\r\n", 2);
    assert_eq!(r, ["VA 2 f5 km s2 t-1 O77", "hi"]);
    assert_eq!(
        c.ask("mg nope v Oab k\r\nmg nope v q\r\nmn\r\n", 2),
        ["EN Oab knope", "MN"]
    );
    let cas: u64 = c.ask("mg m c\r\n", 1)[0][4..].parse().unwrap();
    assert_eq!(c.ask(&format!("ms m 1 C{}\r\nx\r\n", cas + 1), 1), ["EX"]);
    assert_eq!(c.ask(&format!("ms m 1 C{cas} q\r\nx\r\nmn\r\n"), 1), ["MN"]);
    assert_eq!(
        c.ask("ms m 1 MA\r\ny\r\nmg m v\r\n", 3),
        ["HD", "VA 2", "xy"]
    );
    assert_eq!(
        c.ask("ms m 1 ME\r\nz\r\nms new 1 MR\r\nz\r\n", 2),
        ["NS", "NS"]
    );
    assert_eq!(c.ask("mg m T100 t v\r\n", 2), ["VA 2 t100", "xy"]);
    assert_eq!(
        c.ask(
            "ma cnt\r\nma cnt N0 J41 v\r\nma cnt v\r\nma cnt MD D40 v\r\n",
            7
        ),
        ["NF", "VA 2", "41", "VA 2", "42", "VA 1", "2"]
    );
    assert_eq!(c.ask("md cnt q\r\nmd cnt\r\nmn\r\n", 2), ["NF", "MN"]);
    // Base64 keys: "foo" is Zm9v.
    assert_eq!(
        c.ask("ms Zm9v 3 b\r\nbar\r\nmg Zm9v b v k\r\nmg foo v\r\n", 5),
        ["HD", "VA 3 kZm9v b", "bar", "VA 3", "bar"]
    );
    assert_eq!(
        c.ask("mg !!!! b v\r\n", 1),
        ["CLIENT_ERROR error decoding key"]
    );
    assert_eq!(
        c.ask(&format!("mg m O{}\r\n", "x".repeat(40)), 1),
        ["CLIENT_ERROR opaque token too long"]
    );
    server.stop().unwrap();
}

#[test]
fn pipelined_split_noreply_and_binary_values() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    // Everything in one write, replies in order.
    let mut req = Vec::new();
    for i in 0..200 {
        req.extend_from_slice(
            format!("set k{i} {i} 0 {}\r\nv{i}\r\n", format!("v{i}").len()).as_bytes(),
        );
    }
    for i in 0..200 {
        req.extend_from_slice(format!("get k{i}\r\n").as_bytes());
    }
    c.send(&req);
    for _ in 0..200 {
        assert_eq!(c.line(), "STORED");
    }
    for i in 0..200 {
        assert_eq!(
            c.line(),
            format!("VALUE k{i} {i} {}", format!("v{i}").len())
        );
        assert_eq!(c.line(), format!("v{i}"));
        assert_eq!(c.line(), "END");
    }
    // One request a byte at a time (every TCP segment split).
    let mut binary: Vec<u8> = (0..=255u8).collect();
    binary.extend_from_slice(b"\r\nEND\r\n\0get x\r\n");
    let mut req = format!("set bin 0 0 {}\r\n", binary.len()).into_bytes();
    req.extend_from_slice(&binary);
    req.extend_from_slice(b"\r\n");
    for b in &req {
        c.w.write_all(&[*b]).unwrap();
        c.w.flush().unwrap();
    }
    assert_eq!(c.line(), "STORED");
    assert_eq!(c.get("bin").as_deref(), Some(&binary[..]));
    // noreply: no replies at all, then mn proves the pipeline is drained.
    c.send(b"set q 0 0 1 noreply\r\na\r\nadd q 0 0 1 noreply\r\nb\r\nappend q 0 0 1 noreply\r\nc\r\nincr q 1 noreply\r\ndelete q noreply\r\ntouch q 1 noreply\r\nflush_all noreply\r\nset q2 0 0 1 noreply\r\nz\r\nmn\r\n");
    assert_eq!(c.line(), "MN");
    assert_eq!(c.get("q2").as_deref(), Some(&b"z"[..]));
    server.stop().unwrap();
}

#[test]
fn expiry() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let r = c.ask(
        &format!(
            "set neg 0 -1 1\r\nx\r\nset past 0 {} 1\r\nx\r\nset future 0 {} 1\r\nx\r\nset rel 0 1000 1\r\nx\r\nset short 0 1 1\r\nx\r\n",
            now - 100,
            now + 100_000
        ),
        5,
    );
    assert!(r.iter().all(|l| l == "STORED"));
    assert_eq!(c.get("neg"), None, "negative exptime: expired at once");
    assert_eq!(c.get("past"), None, "absolute time in the past");
    assert!(c.get("future").is_some());
    assert!(c.get("rel").is_some());
    let t = c.ask("mg rel t\r\nmg future t\r\n", 2);
    let ttl: i64 = t[0][4..].parse().unwrap();
    assert!((990..=1000).contains(&ttl), "{t:?}");
    let ttl: i64 = t[1][4..].parse().unwrap();
    assert!((99_000..=100_000).contains(&ttl), "{t:?}");
    assert_eq!(c.ask("touch rel -1\r\n", 1), ["TOUCHED"]);
    assert_eq!(c.get("rel"), None, "touched into the past");
    // A one-second TTL is gone once two seconds have passed.
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(c.get("short"), None);
    assert!(c.get("future").is_some());
    server.stop().unwrap();
}

#[test]
fn cas_race_counts_every_success_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    Conn::new(&server).set("ctr", b"0");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mut c = Conn::new(&server);
            std::thread::spawn(move || {
                let mut wins = 0u64;
                for _ in 0..300 {
                    let g = c.ask("gets ctr\r\n", 3);
                    let cas: u64 = g[0].rsplit(' ').next().unwrap().parse().unwrap();
                    let v: u64 = g[1].parse().unwrap();
                    let nv = (v + 1).to_string();
                    let r = c.ask(&format!("cas ctr 0 0 {} {cas}\r\n{nv}\r\n", nv.len()), 1);
                    match r[0].as_str() {
                        "STORED" => wins += 1,
                        "EXISTS" => {}
                        other => panic!("cas: {other}"),
                    }
                }
                wins
            })
        })
        .collect();
    let wins: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let mut c = Conn::new(&server);
    assert_eq!(c.get("ctr"), Some(wins.to_string().into_bytes()));
    assert!(wins >= 300);
    server.stop().unwrap();
}

#[test]
fn bad_input_gets_errors_and_others_keep_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut other = Conn::new(&server);
    other.set("keep", b"safe");
    let mut c = Conn::new(&server);
    let long = "k".repeat(251);
    assert_eq!(
        c.ask(&format!("set {long} 0 0 1\r\nx\r\n"), 2),
        ["CLIENT_ERROR bad command line format", "ERROR"]
    );
    assert_eq!(
        c.ask(&format!("get {long}\r\n"), 1),
        ["CLIENT_ERROR bad command line format"]
    );
    assert_eq!(
        c.ask(&format!("set {} 0 0 1\r\nx\r\n", "k".repeat(250)), 1),
        ["STORED"]
    );
    assert_eq!(
        c.ask("set k 0 0 -1\r\n", 1),
        ["CLIENT_ERROR bad command line format"]
    );
    assert_eq!(
        c.ask("set k abc 0 1\r\n", 1),
        ["CLIENT_ERROR bad command line format"]
    );
    assert_eq!(
        c.ask("set k 0 0\r\nget\r\nbogus command\r\n\r\n", 4),
        ["ERROR", "ERROR", "ERROR", "ERROR"]
    );
    assert_eq!(
        c.ask("set k 0 0 3\r\nabcde\r\n", 2),
        ["CLIENT_ERROR bad data chunk", "ERROR"]
    );
    assert_eq!(
        c.ask("incr keep x\r\ntouch keep x\r\ndelete keep 5\r\n", 3),
        [
            "CLIENT_ERROR invalid numeric delta argument",
            "CLIENT_ERROR invalid exptime argument",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
        ]
    );
    // Too large: the value is swallowed, the old one removed (as memcached), the line after it
    // is a command again.
    c.set("big", b"old");
    let mut req = format!("set big 0 0 {}\r\n", (1 << 20) + 1).into_bytes();
    req.extend(std::iter::repeat_n(b'x', (1 << 20) + 1));
    req.extend_from_slice(b"\r\nget big\r\n");
    c.send(&req);
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache");
    assert_eq!(c.line(), "END");
    // Garbage bytes.
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i * 7919 % 251) as u8)
        .filter(|&b| b != b'\n')
        .collect();
    c.send(&garbage);
    c.send(b"\r\nmn\r\n");
    assert_eq!(c.line(), "ERROR");
    assert_eq!(c.line(), "MN");
    // A line that never ends is cut off.
    let mut d = Conn::new(&server);
    d.send(&vec![b'a'; 70 * 1024]);
    assert_eq!(d.line(), "CLIENT_ERROR line too long");
    // A client closing in the middle of a value.
    {
        let mut e = Conn::new(&server);
        e.send(b"set half 0 0 100\r\nonly some");
    }
    assert_eq!(other.get("keep").as_deref(), Some(&b"safe"[..]));
    assert_eq!(other.get("half"), None);
    server.stop().unwrap();
}

#[test]
fn many_connections_and_the_connection_limit() {
    // Each connection costs three descriptors here (client, its clone, the server's side).
    // The limit is raised once for the whole binary (common::nofile_limit); the tests running
    // beside this one in the same process keep 500 descriptors.
    let want: u64 = 2000;
    let have = nofile_limit();
    let n = want.min(have.saturating_sub(500) / 3).max(100) as usize;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 12);
    cfg.max_conns = n;
    let server = inpath_cache::Server::start(cfg).unwrap();
    let mut conns: Vec<Conn> = (0..n).map(|_| Conn::new(&server)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.set(&format!("c{i}"), b"v"), "STORED");
    }
    // One more is refused with memcached's message; the others keep working.
    let mut extra = Conn::new(&server);
    assert_eq!(extra.line(), "ERROR Too many open connections");
    for (i, c) in conns.iter_mut().enumerate().step_by(37) {
        assert_eq!(c.get(&format!("c{i}")).as_deref(), Some(&b"v"[..]));
    }
    let mut probe = Conn::new(&server);
    assert_eq!(probe.line(), "ERROR Too many open connections");
    drop(conns);
    drop(probe);
    // Once they are gone, new clients are served again.
    let mut again = None;
    for _ in 0..200 {
        let mut c = Conn::new(&server);
        c.send(b"mn\r\n");
        if c.line() == "MN" {
            again = Some(c);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut c = again.expect("served again after the others closed");
    assert!(c.stat("rejected_connections") >= 2);
    server.stop().unwrap();
}

/// `stats` subcommands a monitoring tool or client library sends: each gets memcached's reply
/// shape (and `reset` zeroes the counters), never a silent wait.
#[test]
fn stats_subcommands_answer_like_memcached() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    // An empty cache: no item class yet, as memcached reports it.
    assert_eq!(c.ask("stats items\r\n", 1), ["END"]);
    assert_eq!(
        c.ask("stats slabs\r\n", 3),
        ["STAT active_slabs 0", "STAT total_malloced 0", "END"]
    );
    for i in 0..10 {
        assert_eq!(c.set(&format!("k{i}"), b"value"), "STORED");
    }
    assert!(c.get("k1").is_some());
    assert!(c.get("nope").is_none());
    let items = c.ask("stats items\r\n", 7);
    assert_eq!(items[0], "STAT items:1:number 10");
    assert_eq!(items[1], "STAT items:1:number_hot 10");
    assert_eq!(items[6], "END");
    let slabs = c.ask("stats slabs\r\n", 4);
    assert_eq!(slabs[0], "STAT 1:used_chunks 10");
    assert_eq!(slabs[1], "STAT active_slabs 1");
    let malloced: u64 = slabs[2]
        .strip_prefix("STAT total_malloced ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(malloced >= 10 * 5, "{slabs:?}");
    assert_eq!(
        c.ask("stats sizes\r\n", 2),
        ["STAT sizes_status disabled", "END"]
    );
    assert_eq!(c.ask("stats cachedump 2 10\r\n", 1), ["END"]);
    assert_eq!(c.ask("stats detail dump\r\n", 1), ["END"]);
    assert_eq!(c.ask("stats detail off\r\n", 1), ["OK"]);
    assert_eq!(
        c.ask("stats detail\r\n", 1),
        ["CLIENT_ERROR usage: stats detail on|off|dump"]
    );
    assert!(c.ask("stats detail on\r\n", 1)[0].starts_with("SERVER_ERROR"));
    assert_eq!(c.ask("stats nonsense\r\n", 1), ["ERROR"]);
    // reset: the counters start again; what the cache holds does not change.
    assert_eq!(c.stat("cmd_get"), 2);
    assert_eq!(c.ask("stats reset\r\n", 1), ["RESET"]);
    let s = c.stats();
    for counter in [
        "cmd_get",
        "cmd_set",
        "get_hits",
        "get_misses",
        "total_items",
    ] {
        assert_eq!(s[counter], "0", "{counter} after stats reset");
    }
    assert_eq!(s["curr_items"], "10");
    assert_eq!(c.get("k9").as_deref(), Some(&b"value"[..]));
    assert_eq!(c.stat("get_hits"), 1);
    assert_eq!(c.ask("shutdown\r\n", 1), ["ERROR: shutdown not enabled"]);
    assert_eq!(
        c.ask("version\r\n", 1)[0].split(' ').next(),
        Some("VERSION")
    );
}

/// `cache_memlimit` changes the DRAM budget while serving: shrinking moves values out of DRAM
/// to their flash records (still readable), a budget below the index and log buffers is refused
/// with the smallest one, and bad arguments get ERROR.
#[test]
fn cache_memlimit_moves_the_dram_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    let value = vec![b'v'; 20_000];
    for i in 0..150 {
        assert_eq!(c.set(&format!("big{i}"), &value), "STORED");
    }
    let before = c.stats();
    let limit: u64 = before["limit_maxbytes"].parse().unwrap();
    assert_eq!(limit, 8 << 20);
    let dram_items: u64 = before["dram_items"].parse().unwrap();
    assert!(dram_items > 100, "{dram_items} values in DRAM");
    // Too small: the reply names the least budget in megabytes.
    let refused = c.ask("cache_memlimit 1\r\n", 1);
    assert!(
        refused[0].starts_with("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than "),
        "{refused:?}"
    );
    let min_mb: u64 = refused[0]
        .trim_start_matches("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than ")
        .trim_end_matches('m')
        .parse()
        .unwrap();
    assert!((2..8).contains(&min_mb), "{refused:?}");
    assert_eq!(c.stat("limit_maxbytes"), 8 << 20);
    // The least budget: fewer values fit in DRAM, and every value still reads back.
    assert_eq!(c.ask(&format!("cache_memlimit {min_mb}\r\n"), 1), ["OK"]);
    let after = c.stats();
    assert_eq!(after["limit_maxbytes"], (min_mb << 20).to_string());
    let dram_after: u64 = after["dram_items"].parse().unwrap();
    assert!(dram_after < dram_items, "{dram_after} < {dram_items}");
    for i in (0..150).step_by(7) {
        assert_eq!(
            c.get(&format!("big{i}")).as_deref(),
            Some(&value[..]),
            "big{i}"
        );
    }
    // Growing again; noreply answers nothing; bad arguments get ERROR.
    c.send(b"cache_memlimit 16 noreply\r\n");
    assert_eq!(c.stat("limit_maxbytes"), 16 << 20);
    for bad in [
        "cache_memlimit\r\n",
        "cache_memlimit abc\r\n",
        "cache_memlimit 8 9\r\n",
    ] {
        assert_eq!(c.ask(bad, 1), ["ERROR"], "{bad:?}");
    }
    assert_eq!(c.stat("limit_maxbytes"), 16 << 20);
}

/// Reads one get reply: the (key, value) pairs up to END.
fn read_values(c: &mut Conn, with_cas: bool) -> Vec<(String, Vec<u8>)> {
    let mut got = Vec::new();
    loop {
        let l = c.line();
        if l == "END" {
            return got;
        }
        let p: Vec<&str> = l.split(' ').collect();
        assert_eq!(p[0], "VALUE", "{l}");
        assert_eq!(p.len(), if with_cas { 5 } else { 4 }, "{l}");
        let n: usize = p[3].parse().unwrap();
        let v = c.bytes(n + 2);
        assert_eq!(&v[n..], b"\r\n");
        got.push((p[1].to_string(), v[..n].to_vec()));
    }
}

/// A multiget of any length is answered (memcached does): 30,000 keys on one ~400 KB line,
/// sent in pieces, give every hit in order and one END; so do gets and gat; the connection
/// stays usable. A line of only one enormous token is still refused.
#[test]
fn multigets_longer_than_64_kib_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    for i in (0..30_000).step_by(7) {
        let key = format!("long-multiget-key-{i:06}");
        assert_eq!(c.set(&key, key.as_bytes()), "STORED");
    }
    let keys: Vec<String> = (0..30_000)
        .map(|i| format!("long-multiget-key-{i:06}"))
        .collect();
    let expected: Vec<(String, Vec<u8>)> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 7 == 0)
        .map(|(_, k)| (k.clone(), k.clone().into_bytes()))
        .collect();
    for (cmd, with_cas) in [("get", false), ("gets", true), ("gat 0", false)] {
        let line = format!("{cmd} {}\r\n", keys.join(" "));
        assert!(line.len() > 6 * 64 * 1024);
        // In pieces of odd sizes, so a piece often ends inside a key.
        for piece in line.as_bytes().chunks(40_001) {
            c.send(piece);
        }
        assert_eq!(read_values(&mut c, with_cas), expected, "{cmd}");
    }
    assert_eq!(c.ask("version\r\n", 1).len(), 1);
    // A line whose only key never ends is refused as before.
    let mut d = Conn::new(&server);
    let mut line = b"get ".to_vec();
    line.extend(std::iter::repeat_n(b'k', 70 * 1024));
    d.send(&line);
    assert_eq!(d.line(), "CLIENT_ERROR line too long");
    server.stop().unwrap();
}

/// A multiget whose replies are far larger than the output bound (300 hits of 64 KiB = 19 MiB)
/// is answered whole and in order, in bounded pieces.
#[test]
fn a_multiget_with_megabytes_of_replies_streams_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64);
    cfg.store.memory = 32 << 20;
    let server = inpath_cache::Server::start(cfg).unwrap();
    let mut c = Conn::new(&server);
    let n = 300;
    for i in 0..n {
        let key = format!("big{i}");
        assert_eq!(c.set(&key, &value(&key, i, 64 << 10)), "STORED");
    }
    let line: Vec<String> = (0..n).map(|i| format!("big{i}")).collect();
    c.send(format!("get {}\r\nmn\r\n", line.join(" ")).as_bytes());
    let got = read_values(&mut c, false);
    assert_eq!(got.len(), n as usize);
    for (i, (k, v)) in got.iter().enumerate() {
        assert_eq!(k, &format!("big{i}"));
        assert_eq!(check(k, v), Some(i as u64));
    }
    assert_eq!(c.line(), "MN");
    server.stop().unwrap();
}

/// Meta flags memcached 1.6.18 lacks but later versions have: E (the cas a change gets) on
/// ms, md I, ma and mg N; md x (empty the value, keep the item). Plus `me`.
#[test]
fn meta_e_and_x_flags_and_me() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut c = Conn::new(&server);
    assert_eq!(c.ask("ms e 2 E777 c\r\nhi\r\n", 1), ["HD c777"]);
    assert_eq!(c.ask("mg e c v\r\n", 2), ["VA 2 c777", "hi"]);
    assert_eq!(c.ask("md e I E888\r\n", 1), ["HD"]);
    assert_eq!(c.ask("mg e c\r\n", 1), ["HD c888 X W"]);
    assert_eq!(c.ask("ma n N0 J5 E900 c v\r\n", 2), ["VA 1 c900", "5"]);
    assert_eq!(c.ask("ma n E901 c\r\n", 1), ["HD c901"]);
    assert_eq!(c.ask("mg viv N0 E950 c\r\n", 1), ["HD c950 W"]);
    // x: the value goes, the item stays, with the flags given (F) and its cas (or E).
    assert_eq!(c.ask("ms x 3 F5\r\nabc\r\n", 1), ["HD"]);
    assert_eq!(c.ask("md x x F9\r\n", 1), ["HD"]);
    assert_eq!(c.ask("mg x v f\r\n", 2), ["VA 0 f9", ""]);
    assert_eq!(c.ask("md x x I\r\n", 1), ["HD"]);
    assert_eq!(c.ask("mg x s\r\n", 1), ["HD s0 X W"]);
    assert_eq!(c.ask("md nope x\r\n", 1), ["NF"]);
    // me: the item's metadata without bumping it; EN on a miss; b for a base64 key.
    assert_eq!(c.set("dbg", b"12345"), "STORED");
    let l = c.ask("me dbg\r\n", 1);
    assert!(
        l[0].starts_with("ME dbg exp=-1 la=0 cas=") && l[0].contains(" fetch=no cls=1 size="),
        "{l:?}"
    );
    c.get("dbg");
    assert!(c.ask("me dbg\r\n", 1)[0].contains("fetch=yes"));
    assert_eq!(c.ask("me ZGJn b\r\n", 1)[0].split(' ').nth(1), Some("ZGJn"));
    assert_eq!(c.ask("me nope\r\n", 1), ["EN"]);
    assert_eq!(c.ask("me\r\n", 1), ["CLIENT_ERROR bad command line format"]);
    server.stop().unwrap();
}

/// `stats conns` lists the listening socket and every open connection with memcached's fields;
/// a closed connection leaves the list.
#[test]
fn stats_conns_lists_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut a = Conn::new(&server);
    let mut b = Conn::new(&server);
    assert_eq!(b.ask("version\r\n", 1).len(), 1);
    let lines = |c: &mut Conn| {
        c.send(b"stats conns\r\n");
        let mut v = Vec::new();
        loop {
            let l = c.line();
            if l == "END" {
                return v;
            }
            v.push(l);
        }
    };
    let listen = format!("tcp:{}", server.local_addr());
    let count = |l: &[String], suffix: &str| {
        l.iter()
            .filter(|x| x.starts_with("STAT ") && x.contains(suffix))
            .count()
    };
    // `b` has had its answer; its server thread moves it back to waiting a moment later (on a
    // busy machine, after this `stats conns` may be answered), as memcached's does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let l = loop {
        let l = lines(&mut a);
        if count(&l, ":state conn_waiting") == 1 || std::time::Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(count(&l, &format!(":addr {listen}")), 1, "{l:?}");
    assert_eq!(count(&l, ":state conn_listening"), 1, "{l:?}");
    assert_eq!(count(&l, &format!(":listen_addr {listen}")), 2, "{l:?}");
    assert_eq!(count(&l, ":state conn_parse_cmd"), 1, "{l:?}");
    assert_eq!(count(&l, ":state conn_waiting"), 1, "{l:?}");
    assert_eq!(count(&l, ":secs_since_last_cmd "), 3, "{l:?}");
    let peer = format!("tcp:{}", b.w.local_addr().unwrap());
    assert_eq!(count(&l, &format!(":addr {peer}")), 1, "{l:?}");
    drop(b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let l = lines(&mut a);
        if count(&l, &format!(":addr {peer}")) == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{l:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    server.stop().unwrap();
}
