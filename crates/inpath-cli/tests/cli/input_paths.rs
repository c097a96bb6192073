//! The input path does not change results: a file read through its memory map, the same file
//! streamed (`INPATH_MMAP=off`), standard input from a pipe, `/dev/stdin`, a FIFO, and any
//! thread count give the same output for corr, sketch, seal and the codecs. Also the odd
//! inputs: an empty file, a directory, a file that is not a whole number of records.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// How the input reaches the command.
#[derive(Clone, Copy, Debug)]
enum Via {
    /// The file name: mapped.
    Mapped,
    /// The file name with mapping turned off: read(2).
    Streamed,
    /// `-` with the bytes written into a pipe.
    Pipe,
    /// `/dev/stdin` naming that pipe.
    DevStdin,
    /// A FIFO in the file system, written by a thread.
    Fifo,
}

const ALL: [Via; 5] = [
    Via::Mapped,
    Via::Streamed,
    Via::Pipe,
    Via::DevStdin,
    Via::Fifo,
];

/// Runs `inpath` with `args`, where the argument `@IN` stands for the input named as `via`
/// says, and returns its output.
fn run(args: &[&str], file: &Path, via: Via, dir: &Path) -> Output {
    let fifo = dir.join("input.fifo");
    let name: String = match via {
        Via::Mapped | Via::Streamed => file.to_str().unwrap().to_string(),
        Via::Pipe => "-".into(),
        Via::DevStdin => "/dev/stdin".into(),
        Via::Fifo => {
            let _ = std::fs::remove_file(&fifo);
            let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(made.success());
            fifo.to_str().unwrap().to_string()
        }
    };
    let args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "@IN" { name.as_str() } else { a })
        .collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_inpath"));
    cmd.args(&args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if matches!(via, Via::Streamed) {
        cmd.env("INPATH_MMAP", "off");
    }
    let piped = matches!(via, Via::Pipe | Via::DevStdin);
    let data = if piped || matches!(via, Via::Fifo) {
        std::fs::read(file).unwrap()
    } else {
        Vec::new()
    };
    cmd.stdin(if piped { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().expect("runs");
    let feeder = if piped {
        let mut stdin = child.stdin.take().unwrap();
        Some(std::thread::spawn(move || {
            // The command may fail before reading everything: a broken pipe is fine.
            let _ = stdin.write_all(&data);
        }))
    } else if matches!(via, Via::Fifo) {
        let fifo = fifo.clone();
        Some(std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            for piece in data.chunks(100_000) {
                if f.write_all(piece).is_err() {
                    break;
                }
            }
        }))
    } else {
        None
    };
    let out = child.wait_with_output().unwrap();
    if let Some(feeder) = feeder {
        feeder.join().unwrap();
    }
    out
}

fn ok(args: &[&str], file: &Path, via: Via, dir: &Path) -> Vec<u8> {
    let out = run(args, file, via, dir);
    assert!(
        out.status.success(),
        "{args:?} via {via:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The JSON result without the fields that legitimately differ between runs.
fn result(json: &[u8]) -> serde_json::Value {
    let mut value: serde_json::Value = serde_json::from_slice(json).expect("JSON output");
    if let Some(map) = value.as_object_mut() {
        for key in [
            "seconds", "gb_per_s", "threads", "input", "inputs", "files", "file",
        ] {
            map.remove(key);
        }
    }
    value
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn corr_and_sketch_agree_on_every_path_and_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // 5 MiB: several chunks and mapped steps, lanes cut inside it.
    let data = random_bytes(5 << 20, 1);
    let file = write(dir, "items.bin", &data);
    let jobs: [&[&str]; 4] = [
        &[
            "corr", "@IN", "--layout", "lines", "--type", "u32", "--json",
        ],
        &["corr", "@IN", "--layout", "lines", "--type", "u8", "--json"],
        &["sketch", "@IN", "--format", "u32", "--json", "-q"],
        &[
            "sketch",
            "@IN",
            "--format",
            "u32",
            "--sketches",
            "hll",
            "--json",
            "-q",
        ],
    ];
    for job in jobs {
        let expected = result(&ok(
            &[job, &["--threads", "1"]].concat(),
            &file,
            Via::Mapped,
            dir,
        ));
        for via in ALL {
            for threads in ["1", "2", "3"] {
                let got = result(&ok(
                    &[job, &["--threads", threads]].concat(),
                    &file,
                    via,
                    dir,
                ));
                assert_eq!(got, expected, "{job:?} via {via:?} with {threads} threads");
            }
        }
    }
}

#[test]
fn seal_and_codecs_give_the_same_bytes_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // Text-like data that compresses, 3 MiB plus a partial page.
    let mut data = Vec::new();
    let mut i = 0u64;
    while data.len() < (3 << 20) + 1234 {
        data.extend_from_slice(format!("{i}|{}|row {}|\n", i * 7919 % 1000, i % 97).as_bytes());
        i += 1;
    }
    let file = write(dir, "pages.txt", &data);
    let jobs: [&[&str]; 4] = [
        // No cipher: the records are deterministic (no nonce), so bytes can be compared.
        &[
            "seal",
            "@IN",
            "-o",
            "-",
            "--compress",
            "deflate-6",
            "--cipher",
            "none",
            "-q",
        ],
        &["compress", "@IN", "-o", "-", "--format", "gzip", "-q"],
        &["compress", "@IN", "-o", "-", "--format", "zstd", "-q"],
        &["compress", "@IN", "-o", "-", "--format", "lz4", "-q"],
    ];
    for job in jobs {
        let expected = ok(job, &file, Via::Mapped, dir);
        for via in ALL {
            assert!(ok(job, &file, via, dir) == expected, "{job:?} via {via:?}");
        }
        // And back, from every path, to the original bytes.
        let packed = write(dir, "packed", &expected);
        let back: &[&str] = if job[0] == "seal" {
            &["unseal", "@IN", "-o", "-", "-q"]
        } else {
            &["decompress", "@IN", "-o", "-", "-q"]
        };
        for via in ALL {
            assert!(ok(back, &packed, via, dir) == data, "{back:?} via {via:?}");
        }
    }
    for threads in ["1", "2", "4"] {
        let sealed = ok(
            &[
                "seal",
                "@IN",
                "-o",
                "-",
                "--compress",
                "lz4",
                "--cipher",
                "none",
                "-q",
                "--threads",
                threads,
            ],
            &file,
            Via::Mapped,
            dir,
        );
        let packed = write(dir, "packed", &sealed);
        assert!(
            ok(
                &["unseal", "@IN", "-o", "-", "-q", "--threads", threads],
                &packed,
                Via::Mapped,
                dir
            ) == data
        );
    }
}

#[test]
fn odd_inputs_are_handled_alike_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // An empty file: an empty result, not an error.
    let empty = write(dir, "empty.bin", b"");
    for via in ALL {
        let json = result(&ok(
            &["sketch", "@IN", "--format", "u32", "--json", "-q"],
            &empty,
            via,
            dir,
        ));
        assert_eq!(json["count"], 0, "via {via:?}: {json}");
    }
    // Larger than a chunk and not a whole number of 64-byte lines: the same clear error,
    // counting the whole records, on every path and thread count.
    let ragged = write(dir, "ragged.bin", &random_bytes((3 << 20) + 64 * 5 + 10, 2));
    for via in ALL {
        for threads in ["1", "2"] {
            let out = run(
                &[
                    "corr",
                    "@IN",
                    "--layout",
                    "lines",
                    "--type",
                    "u32",
                    "--threads",
                    threads,
                ],
                &ragged,
                via,
                dir,
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "via {via:?}: {stderr}");
            assert!(
                stderr.contains("10 byte(s)") && stderr.contains("49157 whole"),
                "via {via:?}, {threads} threads: {stderr}"
            );
        }
    }
    // A directory is refused by name.
    let out = run(&["sketch", "@IN", "--format", "u32"], dir, Via::Mapped, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
