//! `inpath cache serve` as a process: kill -9 in the middle of a write-heavy run, SIGTERM, a
//! taken port, a flash file that cannot be created, memcached's option spellings.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::command as inpath;

/// Starts a server on a free loopback port; returns it and its address (read from its log).
fn serve(flash: &Path, extra: &[&str]) -> (Child, String) {
    let mut cmd = inpath();
    cmd.args([
        "cache",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--memory",
        "8MiB",
    ])
    .arg("--flash")
    .arg(flash)
    .args(["--flash-size", "16MiB", "-t", "2"])
    .args(if extra.contains(&"--sync-ms") {
        &[][..]
    } else {
        &["--sync-ms", "20"][..]
    })
    .args(extra);
    spawn_server(cmd)
}

/// Spawns `cmd` (an `inpath cache serve`), waits for its "listening on" line and returns the
/// child and its address.
fn spawn_server(mut cmd: Command) -> (Child, String) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn inpath");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("server exited before listening");
        }
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = err.read_to_end(&mut sink);
    });
    (child, addr)
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn new(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        self.r.read_line(&mut l)?;
        if !l.ends_with("\r\n") {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }
    fn set(&mut self, key: &str, v: &[u8]) -> std::io::Result<String> {
        let mut req = format!("set {key} 0 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req)?;
        self.line()
    }
    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.w
            .write_all(format!("get {key}\r\n").as_bytes())
            .unwrap();
        let l = self.line().unwrap();
        if l == "END" {
            return None;
        }
        let n: usize = l.rsplit(' ').next().unwrap().parse().unwrap();
        let mut v = vec![0; n + 2];
        self.r.read_exact(&mut v).unwrap();
        assert_eq!(self.line().unwrap(), "END");
        v.truncate(n);
        Some(v)
    }
}

fn value(key: &str, version: u64) -> Vec<u8> {
    let mut v = format!("{key}|{version}|").into_bytes();
    v.resize(700, b'.');
    let sum = crc32fast::hash(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn version_of(key: &str, v: &[u8]) -> Option<u64> {
    let (body, sum) = v.split_at(v.len().checked_sub(4)?);
    if crc32fast::hash(body).to_le_bytes() != sum {
        return None;
    }
    let text = String::from_utf8_lossy(body);
    let mut p = text.splitn(3, '|');
    (p.next()? == key).then_some(())?;
    p.next()?.parse().ok()
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("server did not exit within 10 s");
}

#[test]
fn kill_9_during_writes_loses_nothing_flushed_and_serves_nothing_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("c.flash");
    let (mut child, addr) = serve(&flash, &[]);
    let mut c = Conn::new(&addr);
    for k in 0..3000 {
        assert_eq!(
            c.set(&format!("a{k}"), &value(&format!("a{k}"), 1))
                .unwrap(),
            "STORED"
        );
    }
    // Past a few flush intervals (--sync-ms 20) everything above is on the file.
    std::thread::sleep(Duration::from_millis(400));
    // A write-heavy run, killed in the middle. It is bounded by a count of sets, not by time:
    // the 16 MiB log holds about 20,000 of these records, and a faster machine writing for a
    // fixed time could wrap it, reclaiming the chunks of the a-keys (a cache may drop those;
    // this test is about a crash, not about capacity). Killed once 3,000 sets are acknowledged,
    // with each writer stopping at 5,000: at most ~13,000 records in all.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|t| {
            let addr = addr.clone();
            let stop = stop.clone();
            let acknowledged = acknowledged.clone();
            std::thread::spawn(move || {
                let mut c = Conn::new(&addr);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 5000 {
                    let key = format!("b{}", (n * 7 + t) % 4000);
                    if c.set(&key, &value(&key, n)).is_err() {
                        break;
                    }
                    n += 1;
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
                n
            })
        })
        .collect();
    // At least 100 ms of writing too, so that some of the run is past a flush (--sync-ms 20).
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    while (acknowledged.load(Ordering::Relaxed) < 3000
        || started.elapsed() < Duration::from_millis(100))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(written > 100, "the write-heavy run wrote {written}");

    let (mut child, addr) = serve(&flash, &[]);
    let mut c = Conn::new(&addr);
    for k in 0..3000 {
        let key = format!("a{k}");
        let v = c
            .get(&key)
            .unwrap_or_else(|| panic!("{key} was flushed before the crash and is lost"));
        assert_eq!(version_of(&key, &v), Some(1), "{key}");
    }
    let mut back = 0;
    for k in 0..4000 {
        let key = format!("b{k}");
        if let Some(v) = c.get(&key) {
            assert!(
                version_of(&key, &v).is_some(),
                "wrong value served for {key}"
            );
            back += 1;
        }
    }
    assert!(back > 0, "some of the write-heavy run was flushed");
    // SIGTERM: clean shutdown with exit status 0.
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut child).success());
}

#[test]
fn sigterm_then_restart_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("c.flash");
    let (mut child, addr) = serve(&flash, &["--sync-ms", "100000"]);
    let mut c = Conn::new(&addr);
    for k in 0..2000 {
        assert_eq!(
            c.set(&format!("k{k}"), &value(&format!("k{k}"), 3))
                .unwrap(),
            "STORED"
        );
    }
    // No periodic flush has run (100 s): only the clean shutdown writes the tail.
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut child).success());
    let (mut child, addr) = serve(&flash, &[]);
    let mut c = Conn::new(&addr);
    for k in 0..2000 {
        let key = format!("k{k}");
        let v = c
            .get(&key)
            .unwrap_or_else(|| panic!("{key} lost over a clean restart"));
        assert_eq!(version_of(&key, &v), Some(3));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn memcached_spellings_a_taken_port_and_an_uncreatable_flash_file() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = inpath()
        .args([
            "cache",
            "serve",
            "-l",
            "127.0.0.1",
            "-p",
            &port,
            "-m",
            "16",
            "-t",
            "2",
            "-c",
            "100",
            "-I",
            "512k",
        ])
        .arg("--flash")
        .arg(dir.path().join("x.flash"))
        .args(["--flash-size", "16MiB"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on 127.0.0.1:"), "{err}");
    let out = inpath()
        .args([
            "cache",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--flash",
            "/nonexistent-dir/x/cache.flash",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("flash file /nonexistent-dir/x/cache.flash"),
        "{err}"
    );
    let out = inpath()
        .args([
            "cache",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "1MiB",
            "--flash",
        ])
        .arg(dir.path().join("y.flash"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("too small"));
    // The memcached spellings start a working server.
    let (mut child, addr) = serve(&dir.path().join("z.flash"), &["-c", "50", "-I", "512k"]);
    let mut c = Conn::new(&addr);
    c.w.write_all(format!("set big 0 0 {}\r\n", 600 * 1024).as_bytes())
        .unwrap();
    c.w.write_all(&vec![b'x'; 600 * 1024]).unwrap();
    c.w.write_all(b"\r\n").unwrap();
    assert_eq!(c.line().unwrap(), "SERVER_ERROR object too large for cache");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `-B binary` serves memcached's binary protocol and closes a text connection; `-B ascii`
/// reads everything as text; the default (auto) takes both.
#[test]
fn dash_b_picks_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    // A binary Noop with opaque 7; its reply echoes the opcode and the opaque.
    let mut noop = vec![0x80, 0x0a];
    noop.extend_from_slice(&[0; 10]);
    noop.extend_from_slice(&7u32.to_be_bytes());
    noop.extend_from_slice(&[0; 8]);
    let binary_noop = |addr: &str| -> Vec<u8> {
        let mut c = Conn::new(addr);
        c.w.write_all(&noop).unwrap();
        let mut reply = vec![0u8; 24];
        c.r.read_exact(&mut reply).unwrap();
        reply
    };
    for (i, mode) in ["binary", "auto"].into_iter().enumerate() {
        let (mut child, addr) = serve(&dir.path().join(format!("b{i}.flash")), &["-B", mode]);
        let reply = binary_noop(&addr);
        assert_eq!(&reply[..2], &[0x81, 0x0a], "-B {mode}");
        assert_eq!(&reply[6..8], &[0, 0], "-B {mode}: status");
        assert_eq!(&reply[12..16], &7u32.to_be_bytes(), "-B {mode}: opaque");
        let mut c = Conn::new(&addr);
        let text = c.set("k", b"v");
        if mode == "binary" {
            assert!(text.is_err(), "-B binary closes a text connection");
        } else {
            assert_eq!(text.unwrap(), "STORED");
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let (mut child, addr) = serve(&dir.path().join("a.flash"), &["-B", "ascii"]);
    let mut c = Conn::new(&addr);
    c.w.write_all(&noop).unwrap();
    assert_eq!(
        c.line().unwrap(),
        "ERROR",
        "binary bytes read as a text line"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn seal_key_seals_the_flash_file_and_restarts_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    assert!(inpath()
        .args(["seal", "keygen", "-o"])
        .arg(&keys)
        .status()
        .unwrap()
        .success());
    let flash = dir.path().join("s.flash");
    let keyarg = keys.to_str().unwrap();
    let (mut child, addr) = serve(&flash, &["--seal-key", keyarg, "--sync-ms", "100000"]);
    let mut c = Conn::new(&addr);
    for k in 0..3000 {
        let key = format!("sealed{k}");
        assert_eq!(c.set(&key, &value(&key, 9)).unwrap(), "STORED");
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut child).success());
    let raw = std::fs::read(&flash).unwrap();
    assert!(
        !raw.windows(9).any(|w| w == b"sealed123"),
        "a key is readable in the flash file"
    );
    let (mut child, addr) = serve(&flash, &["--seal-key", keyarg]);
    let mut c = Conn::new(&addr);
    for k in (0..3000).step_by(13) {
        let key = format!("sealed{k}");
        let v = c.get(&key).unwrap_or_else(|| panic!("{key} lost"));
        assert_eq!(version_of(&key, &v), Some(9));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Without the key nothing is served.
    let (mut child, addr) = serve(&flash, &[]);
    let mut c = Conn::new(&addr);
    assert_eq!(c.get("sealed13"), None);
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A memcached config file in Debian's format (comments, `-d`, `logfile`, `-P`, `-l`, `-p`,
/// `-m`) starts the server in the background; `-F`, `-c`, `-U 0`, `-vv` and `-o` options that
/// apply are taken; the pid file goes away on a clean stop (SIGTERM).
#[test]
fn a_memcached_config_file_starts_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (log, pid, flash) = (d.join("mc.log"), d.join("mc.pid"), d.join("c.flash"));
    let conf = d.join("memcached.conf");
    std::fs::write(
        &conf,
        format!(
            "# memcached default config file\n-d\n\n# Log memcached's output\nlogfile {}\n\
             -m 16\n-p 0\n-l 127.0.0.1 # loopback only\n-c 100\n-U 0\n-F\n-vv\n\
             -o maxconns_fast,hashpower=16\n-P {}\n",
            log.display(),
            pid.display()
        ),
    )
    .unwrap();
    let out = inpath()
        .args(["cache", "serve", "--config"])
        .arg(&conf)
        .arg("--flash")
        .arg(&flash)
        .args(["--flash-size", "16MiB", "-t", "2"])
        .output()
        .unwrap();
    inpath_testkit::run::expect_success("cache serve --config", &out);
    // The background server writes its pid file and its address to the log.
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(rest) = text.split("listening on ").nth(1) {
            if pid.exists() {
                break rest.split(' ').next().unwrap().to_string();
            }
        }
        assert!(Instant::now() < deadline, "no server in the log: {text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let server_pid: u32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    let mut ask = |req: &str, lines: usize| -> Vec<String> {
        w.write_all(req.as_bytes()).unwrap();
        (0..lines)
            .map(|_| {
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                l.trim_end().to_string()
            })
            .collect()
    };
    assert_eq!(ask("set k 0 0 2\r\nhi\r\n", 1), ["STORED"]);
    assert_eq!(ask("get k\r\n", 3), ["VALUE k 0 2", "hi", "END"]);
    assert_eq!(
        ask("flush_all\r\n", 1),
        ["CLIENT_ERROR flush_all not allowed"]
    );
    let settings = ask("stats settings\r\n", 8);
    assert!(
        settings.contains(&"STAT maxconns 100".to_string()),
        "{settings:?}"
    );
    assert!(
        settings.contains(&format!("STAT maxbytes {}", 16u64 << 20)),
        "{settings:?}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &server_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while pid.exists() {
        assert!(
            Instant::now() < deadline,
            "the pid file stayed after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("taken without effect"), "{text}");
    // -vv: connections and request lines, as memcached logs them.
    for needle in [
        " new auto-negotiating client connection",
        ": Client using the ascii protocol",
        " get k\n",
        " VALUE k 0 2\n",
        " connection closed.",
    ] {
        assert!(
            text.contains(needle),
            "no {needle:?} in the -vv log:\n{text}"
        );
    }
    assert!(text.contains("stopped"), "{text}");
}

/// Every memcached option inpath does not have is refused at start, by name and with the
/// reason; nothing is created.
#[test]
fn memcached_options_inpath_lacks_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let flash = dir.path().join("c.flash");
    let flash = flash.to_str().unwrap();
    let program = crate::common::program(dir.path());
    for (args, needle) in [
        (&["-s", "/tmp/mc.sock"][..], "-s/-a is not supported"),
        (&["-a", "700"], "-s/-a is not supported"),
        (&["-M"], "-M with --flash is not supported"),
        (&["-D", ":"], "-D is not supported"),
        // The security options are taken (tests/cache/security.rs); what they lack is named.
        (&["-S"], "give --sasl-pwdb FILE or set MEMCACHED_SASL_PWDB"),
        (&["-Y", "auth.txt"], "cannot read auth file auth.txt"),
        (
            &["-S", "-B", "ascii"],
            "You cannot allow the ASCII protocol while using SASL",
        ),
        (&["-e", "/dev/shm/mem"], "-e is not supported"),
        (
            &["-Z"],
            "-Z needs the server's certificate: -o ssl_chain_cert=FILE",
        ),
        (&["-o", "ssl_verify_mode=9"], "Invalid ssl_verify_mode 9"),
        (&["-B", "sctp"], "the protocol is ascii, binary or auto"),
        (&["-R", "0"], "-R 0: the number of requests per event"),
        (
            &["-Z", "-o", "ssl_chain_cert=c.pem,ssl_key=k.pem"],
            "cannot read TLS certificate chain c.pem",
        ),
        (
            &["-o", "idle_timeout=soon"],
            "idle_timeout takes whole seconds",
        ),
        (
            &["-o", "maxconns_fast,bogus"],
            "-o bogus: not a memcached extended option",
        ),
    ] {
        let mut argv = vec![
            "cache",
            "serve",
            "--flash",
            flash,
            "-p",
            "0",
            "-l",
            "127.0.0.1",
        ];
        argv.extend_from_slice(args);
        program.fails(&argv, needle);
    }
    // Listeners: notls: without -Z; an open port without TLS and authentication.
    for (listen, needle) in [
        (
            "notls:127.0.0.1",
            "'notls' option is valid only when SSL is enabled",
        ),
        ("0.0.0.0", "or accept an open port with --insecure-no-auth"),
        (
            "127.0.0.1,10.255.255.1",
            "refusing to listen on 10.255.255.1:0",
        ),
    ] {
        let argv = ["cache", "serve", "--flash", flash, "-p", "0", "-l", listen];
        program.fails(&argv, needle);
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing created"
    );
    // A config file that cannot be read, or holds an unknown option, is named.
    program.fails(&["cache", "serve", "--config", "nope.conf"], "nope.conf");
    std::fs::write(dir.path().join("bad.conf"), "-m 64\n--frobnicate\n").unwrap();
    program.fails(&["cache", "serve", "--config", "bad.conf"], "bad.conf");
    let version = program.ok(&["cache", "serve", "-V"]);
    assert!(version.contains("memcached protocol"), "{version}");
}

/// memcached's own command line without a flash file: DRAM only, `-M` (a full cache refuses
/// stores instead of evicting), `-C` (cas 0), `-A` (the `shutdown` command stops the process,
/// which exits cleanly).
#[test]
fn memcached_command_line_runs_from_dram_with_m_c_and_a() {
    let mut cmd = inpath();
    cmd.args([
        "cache",
        "serve",
        "-l",
        "127.0.0.1",
        "-p",
        "0",
        "-m",
        "4",
        "-t",
        "2",
        "-U",
        "0",
        "-M",
        "-C",
        "-A",
    ]);
    let (mut child, addr) = spawn_server(cmd);
    let mut c = Conn::new(&addr);
    assert_eq!(c.set("a", b"hi").unwrap(), "STORED");
    c.w.write_all(b"gets a\r\n").unwrap();
    assert_eq!(c.line().unwrap(), "VALUE a 0 2 0");
    assert_eq!(c.line().unwrap(), "hi");
    assert_eq!(c.line().unwrap(), "END");
    let mut refused = false;
    let mut stored = 0u64;
    for i in 0..20_000u64 {
        let key = format!("k{i}");
        match c.set(&key, &value(&key, i)).unwrap().as_str() {
            "STORED" => stored += 1,
            "SERVER_ERROR out of memory storing object" => {
                refused = true;
                break;
            }
            other => panic!("unexpected reply {other:?}"),
        }
    }
    assert!(
        refused && stored > 1000,
        "{stored} stored, refused: {refused}"
    );
    for i in (0..stored).step_by(97) {
        let key = format!("k{i}");
        let v = c
            .get(&key)
            .unwrap_or_else(|| panic!("{key} evicted under -M"));
        assert_eq!(version_of(&key, &v), Some(i));
    }
    c.w.write_all(b"shutdown\r\n").unwrap();
    let mut rest = Vec::new();
    assert_eq!(c.r.read_to_end(&mut rest).unwrap(), 0, "{rest:?}");
    let status = wait_exit(&mut child);
    assert!(status.success(), "{status:?}");
}

/// memcached's extstore command line and config file start the flash tier on the ext_path file
/// (its size from SIZE; the ext_* tuning options taken and listed with -v); the bad inputs of
/// issue 56 are refused at start, naming the value: a missing directory, the same file twice,
/// two files, a size without a unit, a file larger than the free space, a -m larger than the
/// machine, -R 0.
#[test]
fn memcached_extstore_command_lines_start_the_flash_tier() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // As memcached's t/extstore.t starts it (ext_page_size before ext_path, as it requires).
    let ext = format!("ext_page_size=8,ext_wbuf_size=2,ext_threads=1,ext_path={d}/extstore:64m");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let mut cmd = inpath();
    cmd.args([
        "cache",
        "serve",
        "-l",
        "127.0.0.1",
        "-p",
        "0",
        "-U",
        &udp,
        "-m",
        "64",
        "-v",
    ])
    .args([
        "-o",
        &ext,
        "-o",
        "ext_item_size=512,ext_max_frag=0.8,ext_drop_unread",
    ]);
    let (mut child, addr) = spawn_server(cmd);
    let mut c = Conn::new(&addr);
    assert_eq!(c.set("k", b"v").unwrap(), "STORED");
    c.w.write_all(b"stats\r\n").unwrap();
    let mut stats = std::collections::HashMap::new();
    loop {
        let l = c.line().unwrap();
        if l == "END" {
            break;
        }
        let p: Vec<&str> = l.splitn(3, ' ').collect();
        stats.insert(p[1].to_string(), p[2].to_string());
    }
    let limit: u64 = stats["flash_limit_bytes"].parse().unwrap();
    assert!(
        limit > 60 << 20 && limit <= 64 << 20,
        "the 64m file: {limit}"
    );
    let meta = std::fs::metadata(dir.path().join("extstore")).unwrap();
    assert_eq!(meta.len(), 64 << 20);
    // UDP answers, and SIGTERM still stops the server (its UDP thread too) with status 0.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    u.send_to(
        b"\x00\x07\x00\x00\x00\x01\x00\x00get k\r\n",
        format!("127.0.0.1:{udp}"),
    )
    .unwrap();
    let mut buf = [0u8; 1500];
    let n = u.recv(&mut buf).expect("a UDP reply");
    assert_eq!(
        &buf[..n],
        b"\x00\x07\x00\x00\x00\x01\x00\x00VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert!(wait_exit(&mut child).success());
    // The same from a config file (Debian's format), with UDP on.
    let conf = dir.path().join("memcached.conf");
    std::fs::write(
        &conf,
        format!("-m 64\n-p 0\n-l 127.0.0.1\n-U 0\n-o ext_path={d}/conf.ext:32m\n"),
    )
    .unwrap();
    let mut cmd = inpath();
    cmd.args(["cache", "serve", "--config"]).arg(&conf);
    let (mut child, addr) = spawn_server(cmd);
    let mut c = Conn::new(&addr);
    assert_eq!(c.set("k", b"v").unwrap(), "STORED");
    assert!(dir.path().join("conf.ext").exists());
    kill_server(&mut child);

    let program = crate::common::program(dir.path());
    let free = free_bytes(d);
    let huge = format!("ext_path={d}/huge:1000G");
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["-o".into(), "ext_path=/no/such/dir/x:1G".into()],
            "the directory /no/such/dir does not exist".into(),
        ),
        (
            vec![
                "-o".into(),
                format!("ext_path={d}/a:64m,ext_path={d}/./a:64m"),
            ],
            "names the file".into(),
        ),
        (
            vec![
                "-o".into(),
                format!("ext_path={d}/a:64m"),
                "-o".into(),
                format!("ext_path={d}/b:64m"),
            ],
            "-o ext_path is given 2 times".into(),
        ),
        (
            vec!["-o".into(), format!("ext_path={d}/a:64")],
            "is not a whole number with a unit m, g, t or p".into(),
        ),
        (
            vec!["-o".into(), format!("ext_path={d}/a")],
            "give FILE:SIZE".into(),
        ),
        (
            vec!["-o".into(), format!("ext_path={d}/a:64m:compact")],
            "only the default bucket".into(),
        ),
        (
            vec!["-o".into(), format!("ext_path={d}/a:64m,ext_page_size=8")],
            "ext_page_size must come before any ext_path".into(),
        ),
        (
            vec!["-o".into(), "ext_threads=many".into()],
            "ext_threads takes a whole number".into(),
        ),
        (
            vec!["-o".into(), "ext_bogus=1".into()],
            "-o ext_bogus: not an extstore option".into(),
        ),
        (
            vec![
                "-o".into(),
                format!("ext_path={d}/a:64m"),
                "--flash".into(),
                format!("{d}/b"),
            ],
            "give the flash file once".into(),
        ),
        (
            vec!["-m".into(), "99999999999".into()],
            "is more than this machine has".into(),
        ),
    ];
    for (args, needle) in &cases {
        let mut argv = vec!["cache", "serve", "-p", "0", "-l", "127.0.0.1"];
        if !args.contains(&"-m".to_string()) {
            argv.extend(["-m", "1024"]);
        }
        argv.extend(args.iter().map(String::as_str));
        program.fails(&argv, needle);
    }
    if free < 1000 << 30 {
        program.fails(
            &[
                "cache",
                "serve",
                "-p",
                "0",
                "-l",
                "127.0.0.1",
                "-m",
                "1024",
                "-o",
                &huge,
            ],
            "free on its filesystem",
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with("extstore") && !n.starts_with("conf") && n != "memcached.conf")
        .collect();
    assert!(left.is_empty(), "a refused start created {left:?}");
}

/// Bytes free on the filesystem of `dir` (`df`), for the test of a flash file larger than that.
fn free_bytes(dir: &str) -> u64 {
    let out = Command::new("df")
        .args(["-B1", "--output=avail", dir])
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0)
}

/// Stops a server with SIGKILL and reaps it.
fn kill_server(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
