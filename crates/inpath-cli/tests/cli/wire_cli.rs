//! `inpath wire` end to end: the real binary on loopback, stopped with SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::command as inpath;

fn fails(args: &[&str], needle: &str) {
    crate::common::program(Path::new(".")).fails(args, needle);
}

fn terminate(child: &mut Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "clean exit after SIGTERM: {status}");
            return;
        }
        assert!(Instant::now() < deadline, "did not stop after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits for the `listening` line of a log file; returns the address.
fn listening(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(line) = log_lines(path)
            .into_iter()
            .find(|l| l["event"] == "listening")
        {
            return line["listen"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no listening line");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sink_result_equals_inpath_sketch_on_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i.wrapping_mul(2654435761) % 50_000).to_le_bytes())
        .collect();
    let file = dir.path().join("items.bin");
    std::fs::write(&file, &items).unwrap();
    let saved = dir.path().join("saved");
    std::fs::create_dir(&saved).unwrap();
    let log = dir.path().join("log.jsonl");
    let mut child = inpath()
        .args([
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--log",
        ])
        .arg(&log)
        .arg("--tap")
        .arg(format!("sketch:format=u32,save={}", saved.display()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listening(&log);
    let mut s = TcpStream::connect(&addr).unwrap();
    for piece in items.chunks(12_345) {
        s.write_all(piece).unwrap();
    }
    s.shutdown(Shutdown::Write).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    // Wait for the job line, then stop.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log_lines(&log).iter().any(|l| l["event"] == "connection") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    terminate(&mut child);
    let lines = log_lines(&log);
    let job = lines.iter().find(|l| l["event"] == "job").unwrap();
    assert_eq!(job["taps"]["sketch"]["count"], 200_000);
    assert_eq!(lines.last().unwrap()["event"], "stopped");
    let direct = dir.path().join("direct.skt");
    let out = inpath()
        .args(["sketch", "--format", "u32", "--quiet", "--json", "--save"])
        .arg(&direct)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["cardinality"], job["taps"]["sketch"]["cardinality"]);
    let tapped = std::fs::read(job["taps"]["sketch"]["saved"].as_str().unwrap()).unwrap();
    assert!(
        tapped == std::fs::read(&direct).unwrap(),
        "the same sketch file, byte for byte"
    );
}

#[test]
fn relay_logs_to_stdout_and_forwards() {
    let dest = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest_addr = dest.local_addr().unwrap().to_string();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = dest.accept().unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
    });
    let mut child = inpath()
        .args([
            "wire",
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            &dest_addr,
        ])
        .args([
            "--tap",
            "crc",
            "--direction",
            "both",
            "--quiet",
            "--http",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let first: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(first["event"], "listening");
    let http = first["http"].as_str().unwrap().to_string();
    let mut s = TcpStream::connect(first["listen"].as_str().unwrap()).unwrap();
    s.write_all(b"through the relay").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut back = String::new();
    s.read_to_string(&mut back).unwrap();
    assert_eq!(back, "through the relay");
    echo.join().unwrap();
    let mut events = Vec::new();
    while events
        .iter()
        .filter(|e: &&serde_json::Value| e["event"] == "connection")
        .count()
        < 1
    {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0);
        events.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    let jobs: Vec<_> = events.iter().filter(|e| e["event"] == "job").collect();
    assert_eq!(jobs.len(), 2);
    for job in jobs {
        assert_eq!(job["taps"]["crc"]["crc32"], crc32(b"through the relay"));
    }
    let mut m = TcpStream::connect(&http).unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut metrics = String::new();
    m.read_to_string(&mut metrics).unwrap();
    assert!(
        metrics.contains("inpath_wire_bytes_forwarded_total{direction=\"c2s\"} 17"),
        "{metrics}"
    );
    terminate(&mut child);
}

fn crc32(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: a test-side twin of the crc tap.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn bad_arguments_are_clear_errors() {
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "sketchy",
        ],
        "unknown tap \"sketchy\"",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "sketch:cm=6",
        ],
        "not ROWSxP",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "sketch:bogus=1",
        ],
        "unknown option \"bogus\"",
    );
    fails(
        &["wire", "sink", "--listen", "nowhere"],
        "expected HOST:PORT",
    );
    fails(&["wire", "relay", "--listen", "127.0.0.1:0"], "--to");
    fails(
        &[
            "wire",
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:0x",
        ],
        "bad address",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--job-bytes",
            "0",
        ],
        "job-bytes = 0",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--buffer",
            "lots",
        ],
        "not a size",
    );
    fails(
        &["wire", "sink", "--listen", "127.0.0.1:0", "--buffer", "1"],
        "buffer = 1 is out of range",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--idle-timeout=-1",
        ],
        "--idle-timeout",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "sketch:format=u64",
            "--job-bytes",
            "1001",
        ],
        "a multiple of 8",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--log",
            "/nonexistent/dir/log.jsonl",
        ],
        "cannot write the results log",
    );
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    fails(&["wire", "sink", "--listen", &port], "cannot listen on");
}

/// Starts `inpath wire ARGS --listen 127.0.0.1:0 --log LOG`; returns the child and its address.
fn start(dir: &Path, name: &str, args: &[&str]) -> (Child, String) {
    let log = dir.join(format!("{name}.jsonl"));
    let child = inpath()
        .args(["wire"])
        .args(args)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--log",
            log.to_str().unwrap(),
            "--quiet",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listening(&log);
    (child, addr)
}

fn job_taps(dir: &Path, name: &str) -> serde_json::Value {
    log_lines(&dir.join(format!("{name}.jsonl")))
        .into_iter()
        .find(|l| l["event"] == "job")
        .expect("a job line")["taps"]
        .clone()
}

#[test]
fn sealed_link_between_two_relays_carries_the_bytes_encrypted() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    assert!(inpath()
        .args(["seal", "keygen", "-o", keys.to_str().unwrap()])
        .output()
        .unwrap()
        .status
        .success());
    let keys = keys.to_str().unwrap();
    let data: Vec<u8> = (0..1_000_000u32)
        .flat_map(|i| (i % 7919).to_le_bytes())
        .collect();

    // client -> near relay (--seal) -> observer relay (crc of the sealed bytes) -> far relay
    // (--unseal) -> sink (corr, sketch and crc of the clear bytes).
    let (mut sink, sink_addr) = start(
        dir.path(),
        "sink",
        &[
            "sink",
            "--tap",
            "crc",
            "--tap",
            "sketch:format=u32",
            "--tap",
            "corr:type=u32,streams=16",
        ],
    );
    let (mut far, far_addr) = start(
        dir.path(),
        "far",
        &["relay", "--to", &sink_addr, "--unseal", keys],
    );
    let (mut observer, observer_addr) = start(
        dir.path(),
        "observer",
        &["relay", "--to", &far_addr, "--tap", "crc"],
    );
    let (mut near, near_addr) = start(
        dir.path(),
        "near",
        &[
            "relay",
            "--to",
            &observer_addr,
            "--seal",
            keys,
            "--seal-page",
            "16KiB",
        ],
    );

    let mut client = TcpStream::connect(&near_addr).unwrap();
    for chunk in data.chunks(100_003) {
        client.write_all(chunk).unwrap();
    }
    client.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    assert!(answer.is_empty());
    std::thread::sleep(Duration::from_millis(300));
    for child in [&mut near, &mut observer, &mut far, &mut sink] {
        terminate(child);
    }

    let clear = job_taps(dir.path(), "sink");
    assert_eq!(clear["crc"]["bytes"], data.len());
    assert_eq!(clear["crc"]["crc32"], crc32fast::hash(&data));
    assert_eq!(clear["corr"]["rows"], data.len() / 64);
    let mut direct = inpath_sketch::Sketch::new(
        inpath_sketch::Params::default(),
        inpath_sketch::ItemKind::U32,
    )
    .unwrap();
    direct.update_u32_le(&data).unwrap();
    assert_eq!(
        clear["sketch"]["f2_rows"],
        serde_json::json!(direct.f2_rows())
    );
    // Between the relays the bytes were sealed: more of them (64-byte headers), not the clear ones.
    let sealed = job_taps(dir.path(), "observer");
    assert!(sealed["crc"]["bytes"].as_u64().unwrap() > 0);
    assert_ne!(sealed["crc"]["crc32"], clear["crc"]["crc32"]);
}

#[test]
fn corr_tap_and_seal_flags_refuse_bad_settings() {
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "corr:type=u7",
        ],
        "u7",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "corr:streams=1",
        ],
        "2",
    );
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--tap",
            "corr:colour=red",
        ],
        "unknown option",
    );
    fails(
        &[
            "wire",
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1:9",
            "--seal",
            "/nonexistent/keys",
        ],
        "key file",
    );
}

/// An HTTP/1.1 GET over `inpath_net`'s client (plain, or TLS with `ca`); the whole answer.
fn http_answer(addr: &str, ca: Option<&Path>, head: &str) -> String {
    let credentials = inpath_net::CredentialFiles {
        ca: ca.map(Path::to_path_buf),
        ..Default::default()
    }
    .load()
    .unwrap();
    let mut s = inpath_net::client::connect(addr, &credentials, Duration::from_secs(10)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn open_ports_need_a_sealed_link_or_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    let keys = keys.to_str().unwrap();
    assert!(inpath()
        .args(["seal", "keygen", "-o", keys])
        .output()
        .unwrap()
        .status
        .success());
    // Nothing here binds beyond loopback: each case fails before (or, for the protected
    // relay, at its destination's bad address, after the policy let it through).
    fails(
        &["wire", "sink", "--listen", "0.0.0.0:0"],
        "refusing to listen on 0.0.0.0:0: it is every network interface, and anyone who can \
         reach it could feed its taps",
    );
    fails(
        &["wire", "sink", "--listen", "0.0.0.0:0"],
        "or accept an open port with --insecure-no-auth",
    );
    fails(
        &[
            "wire",
            "relay",
            "--listen",
            "0.0.0.0:0",
            "--to",
            "127.0.0.1:0x",
        ],
        "make it the far end of a sealed link: --unseal KEYFILE",
    );
    fails(
        &[
            "wire",
            "relay",
            "--listen",
            "0.0.0.0:0",
            "--to",
            "127.0.0.1:0x",
            "--seal",
            keys,
        ],
        "refusing to listen on 0.0.0.0:0",
    );
    fails(
        &[
            "wire",
            "relay",
            "--listen",
            "0.0.0.0:0",
            "--to",
            "127.0.0.1:0x",
            "--unseal",
            keys,
            "--seal-cipher",
            "aes256-ctr",
        ],
        "--seal-cipher aes256-ctr does not authenticate records",
    );
    // The far end of a sealed link with the authenticated cipher passes the policy.
    let out = inpath()
        .args([
            "wire",
            "relay",
            "--listen",
            "0.0.0.0:0",
            "--to",
            "127.0.0.1:0x",
            "--unseal",
            keys,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad address"),
        "{err}"
    );
    assert!(!err.contains("refusing"), "{err}");
    // The live page beyond loopback, unprotected, is refused too.
    fails(
        &[
            "wire",
            "sink",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "0.0.0.0:0",
        ],
        "--http: refusing to listen on 0.0.0.0:0",
    );
}

#[test]
fn the_live_results_serve_https_with_a_token_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::common::ok(d, &["tls", "init", "tls"]);
    let token = crate::common::ok(
        d,
        &[
            "tls", "token", "--tokens", "tokens", "--name", "web", "--role", "read",
        ],
    );
    let token = token.trim();
    let at = |p: &str| d.join(p).to_str().unwrap().to_string();
    let (cert, key, tokens) = (at("tls/server.pem"), at("tls/server.key"), at("tokens"));
    let (mut sink, sink_addr) = start(
        d,
        "sink",
        &[
            "sink",
            "--tap",
            "crc",
            "--http",
            "0",
            "--http-tls-cert",
            &cert,
            "--http-tls-key",
            &key,
            "--http-tokens",
            &tokens,
        ],
    );
    let line = log_lines(&d.join("sink.jsonl"))
        .into_iter()
        .find(|l| l["event"] == "listening")
        .unwrap();
    let http = line["http"].as_str().unwrap().to_string();
    assert!(
        http.starts_with("127.0.0.1:"),
        "a port alone is loopback: {http}"
    );
    let mut client = TcpStream::connect(&sink_addr).unwrap();
    client.write_all(b"some bytes").unwrap();
    drop(client);
    let ca = d.join("tls/ca.pem");
    let get = |path: &str, auth: &str| {
        http_answer(
            &http,
            Some(&ca),
            &format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n"),
        )
    };
    let none = get("/connections", "");
    assert!(
        none.starts_with("HTTP/1.1 401") && none.contains("a token is required"),
        "{none}"
    );
    let wrong = get("/metrics", "Authorization: Bearer inpath_wrong\r\n");
    assert!(
        wrong.starts_with("HTTP/1.1 401") && wrong.contains("not valid"),
        "{wrong}"
    );
    let health = get("/health", "");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let bearer = format!("Authorization: Bearer {token}\r\n");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = get("/connections", &bearer);
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        if ok.contains("\"crc\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the connection never showed: {ok}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Plain HTTP on the HTTPS port is told so; the server keeps serving.
    let plain = http_answer(&http, None, "GET /health HTTP/1.1\r\n\r\n");
    assert!(plain.contains("this port speaks HTTPS"), "{plain}");
    assert!(get("/metrics", &bearer).starts_with("HTTP/1.1 200"));
    terminate(&mut sink);
}
