//! Interoperability with the reference tools, both ways: `gzip`, `lz4`, `zstd` and
//! `openssl enc`. The tools come from `scripts/apt-packages.txt`; when one is missing the test
//! fails under CI (`CI` set) and is skipped with a note elsewhere.

use crate::common::{data, Data};
use inpath_seal::aes::{apply, CipherStream, Direction, Key, Mode, Padding};
use inpath_seal::codec::{compress, decompress, Format};
use inpath_seal::kernel::{self, AesKernel};
use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `tool args` with `input` on stdin; `None` when the tool is not installed (outside CI).
fn run(tool: &str, args: &[&str], input: &[u8]) -> Option<Vec<u8>> {
    let child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{tool} is not installed (scripts/apt-packages.txt lists it)"
            );
            eprintln!("skipping: {tool} is not installed");
            return None;
        }
        Err(e) => panic!("{tool}: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out.stdout)
}

fn samples() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        b"x".to_vec(),
        data(Data::Text, 300_000, 1),
        data(Data::Random, 70_000, 2),
        data(Data::Zero, 5 << 20, 3),
    ]
}

#[test]
fn gzip_tool_both_ways() {
    for sample in samples() {
        let ours = compress(Format::Gzip, None, &sample).unwrap();
        let Some(back) = run("gzip", &["-dc"], &ours) else {
            return;
        };
        assert_eq!(back, sample);
        for level in ["-1", "-6", "-9"] {
            let theirs = run("gzip", &["-c", level], &sample).unwrap();
            assert_eq!(decompress(Format::Gzip, &theirs, u64::MAX).unwrap(), sample);
        }
    }
    // A file name in the header (FNAME) and two members, as `gzip a; cat a.gz b.gz` makes.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("named.txt");
    std::fs::write(&path, b"first member\n").unwrap();
    let Some(named) = run("gzip", &["-c", "-N", path.to_str().unwrap()], b"") else {
        return;
    };
    assert_eq!(named[3] & 8, 8, "FNAME set");
    let mut two = named.clone();
    two.extend(run("gzip", &["-c"], b"second member\n").unwrap());
    assert_eq!(
        decompress(Format::Gzip, &two, u64::MAX).unwrap(),
        b"first member\nsecond member\n"
    );
    let ours_two = [
        compress(Format::Gzip, None, b"a").unwrap(),
        compress(Format::Gzip, None, b"b").unwrap(),
    ]
    .concat();
    assert_eq!(run("gzip", &["-dc"], &ours_two).unwrap(), b"ab");
}

#[test]
fn lz4_tool_both_ways() {
    for sample in samples() {
        let ours = compress(Format::Lz4, None, &sample).unwrap();
        let Some(back) = run("lz4", &["-dc"], &ours) else {
            return;
        };
        assert_eq!(back, sample);
        // Defaults (4 MiB blocks, content checksum), linked blocks, block checksums, content
        // size, small independent blocks without checksum, high compression.
        for args in [
            vec!["-c"],
            vec!["-c", "-BD"],
            vec!["-c", "-BX", "-B4"],
            vec!["-c", "--content-size"],
            vec!["-c", "-B4", "-BI", "--no-frame-crc"],
            vec!["-c", "-9", "-BD", "-B5"],
        ] {
            let theirs = run("lz4", &args, &sample).unwrap();
            assert_eq!(
                decompress(Format::Lz4, &theirs, u64::MAX).unwrap(),
                sample,
                "lz4 {args:?}"
            );
        }
    }
}

#[test]
fn zstd_tool_both_ways() {
    for sample in samples() {
        let ours = compress(Format::Zstd, None, &sample).unwrap();
        let Some(back) = run("zstd", &["-dc"], &ours) else {
            return;
        };
        assert_eq!(back, sample);
        for args in [
            vec!["-c", "-1"],
            vec!["-c", "-19"],
            vec!["-c", "--no-check", "-3"],
        ] {
            let theirs = run("zstd", &args, &sample).unwrap();
            assert_eq!(
                decompress(Format::Zstd, &theirs, u64::MAX).unwrap(),
                sample,
                "zstd {args:?}"
            );
        }
    }
    let text = data(Data::Text, 10_000, 4);
    let Some(a) = run("zstd", &["-c"], &text) else {
        return;
    };
    let two = [a.clone(), a].concat();
    assert_eq!(
        decompress(Format::Zstd, &two, u64::MAX).unwrap(),
        [text.clone(), text].concat()
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `input` through a fresh stream on `kern` in one piece.
fn apply_at(
    kern: AesKernel,
    key: &Key,
    mode: Mode,
    iv: Option<[u8; 16]>,
    padding: Padding,
    input: &[u8],
) -> Vec<u8> {
    let mut s =
        CipherStream::with_kernel(key, kern, mode, Direction::Encrypt, iv, padding).unwrap();
    let mut out = Vec::new();
    s.push(input, &mut out).unwrap();
    s.finish(&mut out).unwrap();
    out
}

/// `openssl enc` against the one-call API (the chosen kernel) and every AES kernel the CPU has.
#[test]
fn aes_matches_openssl_enc_for_every_mode_and_key_size() {
    let plain = data(Data::Random, 1000, 5);
    let whole = &plain[..992]; // whole blocks, for -nopad
    for bits in [128u32, 192, 256] {
        let key_bytes = data(Data::Random, bits as usize / 8, u64::from(bits));
        let key = Key::new(&key_bytes).unwrap();
        let iv: [u8; 16] = data(Data::Random, 16, 99).try_into().unwrap();
        for mode in Mode::ALL {
            let cipher = format!("-aes-{bits}-{}", mode.name());
            let mut args = vec!["enc", cipher.as_str(), "-K"];
            let k = hex(&key_bytes);
            let v = hex(&iv);
            args.push(&k);
            if mode.needs_iv() {
                args.extend(["-iv", &v]);
            }
            let iv = mode.needs_iv().then_some(iv);
            // Without padding (stream modes take any length; block modes whole blocks).
            let input: &[u8] = if mode.is_block_mode() { whole } else { &plain };
            let mut nopad = args.clone();
            nopad.push("-nopad");
            let Some(theirs) = run("openssl", &nopad, input) else {
                return;
            };
            let ours = apply(&key, mode, Direction::Encrypt, iv, Padding::None, input).unwrap();
            assert_eq!(ours, theirs, "AES-{bits}-{}", mode.name());
            for kern in kernel::aes_kernels() {
                let ours = apply_at(kern, &key, mode, iv, Padding::None, input);
                assert_eq!(ours, theirs, "{kern} AES-{bits}-{}", mode.name());
            }
            let mut dec = nopad.clone();
            dec.push("-d");
            assert_eq!(run("openssl", &dec, &ours).unwrap(), input);
            // With PKCS#7 (openssl's default) for the block modes.
            if mode.is_block_mode() {
                let theirs = run("openssl", &args, &plain).unwrap();
                let ours =
                    apply(&key, mode, Direction::Encrypt, iv, Padding::Pkcs7, &plain).unwrap();
                assert_eq!(ours, theirs, "AES-{bits}-{} PKCS#7", mode.name());
                for kern in kernel::aes_kernels() {
                    let ours = apply_at(kern, &key, mode, iv, Padding::Pkcs7, &plain);
                    assert_eq!(ours, theirs, "{kern} AES-{bits}-{} PKCS#7", mode.name());
                }
                let back =
                    apply(&key, mode, Direction::Decrypt, iv, Padding::Pkcs7, &theirs).unwrap();
                assert_eq!(back, plain);
            }
        }
    }
}
