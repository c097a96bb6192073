//! Differential test: the same command script to a real memcached (when the `memcached` binary
//! is installed, e.g. Debian's package) and to inpath's cache; the replies must be identical.
//! Replies that differ by design (stats, version, cas values) are left out of the script.

use crate::common::*;
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn memcached_binary() -> Option<String> {
    ["/usr/bin/memcached", "/usr/local/bin/memcached"]
        .iter()
        .find(|p| std::path::Path::new(p).exists())
        .map(|p| p.to_string())
}

pub struct Memcached(pub Child);
impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends one request, then `mn`, and returns everything before the `MN` line.
fn exchange(c: &mut Conn, req: &[u8]) -> Vec<u8> {
    c.send(req);
    c.send(b"mn\r\n");
    let mut out = Vec::new();
    loop {
        let mut l = Vec::new();
        c.r.read_until(b'\n', &mut l).expect("reply");
        assert!(
            !l.is_empty(),
            "connection closed after {:?}",
            String::from_utf8_lossy(req)
        );
        if l == b"MN\r\n" {
            return out;
        }
        out.extend_from_slice(&l);
    }
}

fn script() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = [
        "set a 5 0 3\r\nabc\r\n",
        "get a b\r\n",
        "get a a a\r\n",
        "append a 0 0 2\r\nde\r\n",
        "prepend a 0 0 1\r\nz\r\n",
        "get a\r\n",
        "incr n 1\r\n",
        "set n 0 0 2\r\n10\r\n",
        "incr n 5\r\n",
        "decr n 100\r\n",
        "incr n 18446744073709551615\r\n",
        "incr n 2\r\n",
        "incr a 1\r\n",
        "incr n abc\r\n",
        "touch a 100\r\n",
        "touch nope 100\r\n",
        "touch a abc\r\n",
        "gat 100 a nope\r\n",
        "delete a\r\n",
        "delete a\r\n",
        "delete n 0\r\n",
        "delete x 5\r\n",
        "add x 1 0 1\r\nq\r\n",
        "add x 1 0 1\r\nq\r\n",
        "replace y 0 0 1\r\nq\r\n",
        "replace x 9 0 2\r\nqq\r\n",
        "get x\r\n",
        "cas x 0 0 1 999999\r\nw\r\n",
        "cas nope 0 0 1 1\r\nw\r\n",
        "set k 0 0 3\r\nabcde\r\n",
        "set kk 0 0 -1\r\n",
        "set kk abc 0 1\r\n",
        "set kk 0 0\r\n",
        "bogus\r\n",
        "get\r\n",
        "\r\n",
        "set neg 0 -1 1\r\nx\r\n",
        "get neg\r\n",
        "set q 0 0 1 noreply\r\na\r\n",
        "append q 0 0 1 noreply\r\nb\r\n",
        "incr q 1 noreply\r\n",
        "get q\r\n",
        "delete q noreply\r\n",
        "get q\r\n",
        "ms m 2 T0 F3\r\nhi\r\n",
        "mg m v f k s O123\r\n",
        "mg nope v O5 k\r\n",
        "mg nope v q\r\n",
        "ms m 1 MA\r\ny\r\n",
        "mg m v\r\n",
        "ms m 1 ME\r\nz\r\n",
        "ms new 1 MR\r\nz\r\n",
        "ma cnt\r\n",
        "ma cnt N0 J10 v\r\n",
        "ma cnt v\r\n",
        "ma cnt MD D4 v\r\n",
        "md m q\r\n",
        "md m\r\n",
        "md cnt k O9\r\n",
        "ms Zm9v 1 b\r\nZ\r\n",
        "mg Zm9v b v k\r\n",
        "mg foo v\r\n",
        "verbosity 1\r\n",
        "verbosity invalid\r\n",
        "verbosity 1x\r\n",
        "verbosity 1x noreply\r\n",
        "stats cachedump 64 1\r\n",
        "stats cachedump 1\r\n",
        "stats sizes\r\n",
        "stats sizes extra\r\n",
        "stats detail\r\n",
        "stats detail foo\r\n",
        "stats detail off\r\n",
        "stats detail dump\r\n",
        "stats nonsense\r\n",
        "stats reset\r\n",
        "shutdown\r\n",
        "shutdown graceful\r\n",
        "cache_memlimit\r\n",
        "cache_memlimit abc\r\n",
        "cache_memlimit 100 noreply\r\n",
        "cache_memlimit 100\r\n",
        "flush_all abc\r\n",
        "flush_all\r\n",
        "get x m\r\n",
        // Meta flags: hit-before and last access (h, l, u), stale items and recache wins
        // (md I, ms I, N, R: W, X, Z), errors of the shared flag parser.
        "ms fresh 1\r\nz\r\n",
        "mg fresh u h l\r\n",
        "mg fresh h\r\n",
        "mg fresh h l s\r\n",
        "me nope\r\n",
        "ms st 3\r\nabc\r\n",
        "md st I\r\n",
        "mg st v\r\n",
        "mg st v k O1\r\n",
        "ms st 1 C1 I\r\nS\r\n",
        "mg st v\r\n",
        "ms st 1\r\nN\r\n",
        "mg st v\r\n",
        "md st I q\r\n",
        "mg st s\r\n",
        "md st\r\n",
        "mg viv N30 s\r\n",
        "mg viv s\r\n",
        "mg viv2 N30 v q\r\n",
        "ms viv 2\r\nok\r\n",
        "mg viv v\r\n",
        "mg nope h l u q\r\n",
        "mg nope h l u\r\n",
        "ms r 1 T10\r\nr\r\n",
        "mg r R30\r\n",
        "mg r R30\r\n",
        "mg r R5 s\r\n",
        "mg fresh h h\r\n",
        "mg fresh !\r\n",
        "mg fresh Nabc\r\n",
        "mg fresh C1 D2 J3 MS F4 I\r\n",
        "md fresh zz\r\n",
        "md fresh q q\r\n",
        "ma fresh Dxyz\r\n",
        "ms fresh 1 MXX\r\nb\r\n",
        "ms fresh 1 F-1\r\nb\r\n",
        "ms fresh abc\r\n",
        "ms fresh\r\n",
        "mg\r\n",
        "md\r\n",
        "mg fresh s t c f a b c d e g h i j k l m n o\r\n",
        "mg fresh s t v f O1 h l u q k\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let long = "k".repeat(251);
    s.push(format!("set {long} 0 0 1\r\nx\r\n").into_bytes());
    s.push(format!("get {long}\r\n").into_bytes());
    s.push(format!("set {} 0 0 1\r\nx\r\n", "k".repeat(250)).into_bytes());
    let mut big = format!("set big 0 0 {}\r\n", 2 << 20).into_bytes();
    big.extend(std::iter::repeat_n(b'x', 2 << 20));
    big.extend_from_slice(b"\r\n");
    s.push(big);
    s.push(b"get big\r\n".to_vec());
    let mut bin = b"set bin 0 0 256\r\n".to_vec();
    bin.extend(0..=255u8);
    bin.extend_from_slice(b"\r\n");
    s.push(bin);
    s.push(b"get bin\r\n".to_vec());
    s
}

/// Starts memcached (`extra` after the common options) on a free port of 127.0.0.1 and returns
/// it with what `probe` made of a connection to it.
///
/// The port is found by binding port 0 and letting it go, so something else in this process
/// (it holds every test of the crate: other servers' listeners, thousands of client sockets
/// with ephemeral ports) can take it before memcached binds it. memcached then exits, or the
/// connection reaches another listener; either way another port is tried. `probe` proves the
/// peer: it returns `None` when the reply is not memcached's own (inpath's, or our request
/// echoed by a self-connected socket).
pub fn spawn_memcached<T>(
    bin: &str,
    extra: &[&str],
    probe: impl Fn(std::net::TcpStream) -> Option<T>,
) -> (Memcached, T) {
    for _ in 0..20 {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut cmd = Command::new(bin);
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
        cmd.args(["-t", "2", "-m", "64"]).args(extra);
        if is_root() {
            cmd.args(["-u", "root"]);
        }
        let mut memcached = Memcached(
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        for _ in 0..100 {
            if !matches!(memcached.0.try_wait(), Ok(None)) {
                break; // It exited: the port was taken.
            }
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                match probe(s) {
                    Some(t) => return (memcached, t),
                    None => break, // Not memcached on that port.
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("memcached did not start on any of 20 ports");
}

/// memcached with the text protocol, and a connection to it.
fn start_memcached(bin: &str) -> (Memcached, Conn) {
    spawn_memcached(bin, &[], |s| {
        let mut peer = Conn {
            r: std::io::BufReader::new(s.try_clone().unwrap()),
            w: s,
        };
        peer.send(b"version\r\n");
        let mut reply = Vec::new();
        let _ = peer.r.read_until(b'\n', &mut reply);
        let reply = String::from_utf8_lossy(&reply);
        (reply.starts_with("VERSION ") && !reply.contains("inpath")).then_some(peer)
    })
}

#[test]
fn same_replies_as_memcached() {
    let Some(bin) = memcached_binary() else {
        eprintln!("skipped: memcached is not installed (scripts/apt-packages.txt lists it)");
        return;
    };
    let (_memcached, mut peer) = start_memcached(&bin);
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let mut ours = Conn::new(&server);
    let mut differ = Vec::new();
    for req in script() {
        let a = exchange(&mut ours, &req);
        let b = exchange(&mut peer, &req);
        if a != b {
            differ.push(format!(
                "{:?}\n  inpath:    {:?}\n  memcached: {:?}",
                String::from_utf8_lossy(&req[..req.len().min(60)]),
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    ours.w.flush().unwrap();
    assert!(differ.is_empty(), "replies differ:\n{}", differ.join("\n"));
    server.stop().unwrap();
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
