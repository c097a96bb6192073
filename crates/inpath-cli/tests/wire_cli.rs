//! `inpath wire` end to end: the real binary on loopback, stopped with SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn inpath() -> Command {
    Command::new(env!("CARGO_BIN_EXE_inpath"))
}

fn fails(args: &[&str], needle: &str) {
    let out = inpath().args(args).output().expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(
        stderr.contains(needle),
        "{args:?}: stderr {stderr:?} lacks {needle:?}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
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
