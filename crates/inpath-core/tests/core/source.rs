//! Input paths: a file read through its memory map, the same file streamed, a FIFO and any lane
//! count give the same state; a file truncated while it is mapped is an error, never a crash.

use inpath_core::{
    run_input, run_source, Engine, Error, Framing, Input, Lane, LaneOptions, Result, Source,
};
use rand::{Rng, SeedableRng};
use std::io::Write;

use crate::common::{text, Digest, State};

fn binary(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.gen()).collect()
}

fn one_shot(framing: &Framing, data: &[u8]) -> State {
    let mut reference = Digest::new(framing.clone());
    reference.update(data).unwrap();
    reference.finish().unwrap()
}

fn streamed(path: &std::path::Path) -> Source {
    Source::Stream {
        reader: Box::new(std::fs::File::open(path).unwrap()),
        len: None,
    }
}

#[test]
fn mapped_streamed_and_any_lane_count_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    // Larger than the mapped step (4 MiB) and not a whole number of chunks; the text ends
    // with an unterminated line.
    let fixed = binary(&mut rng, 9_000_000);
    let lines = text(&mut rng, 400_000);
    for (framing, data) in [
        (Framing::Fixed { width: 4 }, &fixed),
        (Framing::Lines, &lines),
    ] {
        let path = dir.path().join("data");
        std::fs::write(&path, data).unwrap();
        let expected = one_shot(&framing, data);
        let input = Input::File(path.clone());
        assert!(matches!(input.source().unwrap(), Source::Mapped(_)));
        for threads in [1, 2, 3, 8] {
            for chunk_size in [4096, 1 << 20] {
                let options = LaneOptions {
                    threads,
                    chunk_size,
                };
                let mut engine = Digest::new(framing.clone());
                let mut last = 0;
                let read = run_input(&mut engine, &input, options, &mut |n| last = n).unwrap();
                assert_eq!(read, data.len() as u64);
                assert_eq!(last, data.len() as u64, "progress ends at the whole file");
                assert_eq!(
                    engine.finish().unwrap(),
                    expected,
                    "mapped, {threads} lanes"
                );

                let mut engine = Digest::new(framing.clone());
                let read =
                    run_source(&mut engine, streamed(&path), &path, options, &mut |_| {}).unwrap();
                assert_eq!(read, data.len() as u64);
                assert_eq!(
                    engine.finish().unwrap(),
                    expected,
                    "streamed, {threads} lanes"
                );
            }
        }
    }
}

#[test]
fn a_partial_last_record_is_reported_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ragged.bin");
    std::fs::write(&path, vec![7u8; 4 * 2_000_000 + 3]).unwrap();
    let input = Input::File(path.clone());
    for threads in [1, 2, 4] {
        let options = LaneOptions {
            threads,
            chunk_size: 1 << 20,
        };
        for source in [input.source().unwrap(), streamed(&path)] {
            let mut engine = Digest::new(Framing::Fixed { width: 4 });
            let err = run_source(&mut engine, source, &path, options, &mut |_| {}).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::TrailingBytes {
                        trailing: 3,
                        complete: 2_000_000,
                        ..
                    }
                ),
                "{threads} lanes: {err}"
            );
        }
    }
}

#[test]
fn empty_files_directories_and_fifos() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let input = Input::File(empty);
    assert!(matches!(input.source().unwrap(), Source::Stream { .. }));
    let mut engine = Digest::new(Framing::Lines);
    assert_eq!(
        run_input(&mut engine, &input, LaneOptions::default(), &mut |_| {}).unwrap(),
        0
    );
    assert_eq!(engine.finish().unwrap(), State::default());

    let err = Input::File(dir.path().to_path_buf()).source().unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");

    let err = Input::File(dir.path().join("missing"))
        .source()
        .unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");

    // A FIFO is streamed, whatever its writer's pace.
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped the FIFO case: mkfifo is not available");
        return;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let data = text(&mut rng, 50_000);
    let expected = one_shot(&Framing::Lines, &data);
    for threads in [1, 2] {
        let writer = {
            let (fifo, data) = (fifo.clone(), data.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                for piece in data.chunks(777) {
                    f.write_all(piece).unwrap();
                }
            })
        };
        let input = Input::File(fifo.clone());
        let source = input.source().unwrap();
        assert!(matches!(source, Source::Stream { len: None, .. }));
        let mut engine = Digest::new(Framing::Lines);
        let options = LaneOptions {
            threads,
            chunk_size: 4096,
        };
        run_source(&mut engine, source, &fifo, options, &mut |_| {}).unwrap();
        writer.join().unwrap();
        assert_eq!(engine.finish().unwrap(), expected, "FIFO, {threads} lanes");
    }
}

/// An engine that truncates its own input file after the first chunk it sees: the file
/// shrinks under the mapping while the job runs.
struct Truncating {
    inner: Digest,
    file: std::path::PathBuf,
    keep: u64,
    done: bool,
}

impl Engine for Truncating {
    type Output = State;
    fn update(&mut self, chunk: &[u8]) -> Result<()> {
        if !self.done {
            self.done = true;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&self.file)
                .unwrap();
            f.set_len(self.keep).unwrap();
        }
        self.inner.update(chunk)
    }
    fn finish(&mut self) -> Result<State> {
        self.inner.finish()
    }
}

impl Lane for Truncating {
    fn framing(&self) -> &Framing {
        self.inner.framing()
    }
    fn fork(&self) -> Self {
        Truncating {
            inner: self.inner.fork(),
            file: self.file.clone(),
            keep: self.keep,
            done: self.done,
        }
    }
    fn close_input(&mut self) -> Result<()> {
        self.inner.close_input()
    }
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.inner.merge(&other.inner)
    }
}

#[test]
fn a_file_truncated_while_mapped_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    // Cut to a page boundary (everything after it raises SIGBUS), to the middle of a page (the
    // rest of that page reads as zeros, no signal) and to nothing.
    for keep in [1u64 << 20, (1 << 20) + 100, 0] {
        for threads in [1, 2] {
            let path = dir.path().join("shrinking.bin");
            std::fs::write(&path, vec![1u8; 24 << 20]).unwrap();
            let input = Input::File(path.clone());
            let mut engine = Truncating {
                inner: Digest::new(Framing::Fixed { width: 4 }),
                file: path.clone(),
                keep,
                done: false,
            };
            let options = LaneOptions {
                threads,
                chunk_size: 1 << 20,
            };
            let err = run_input(&mut engine, &input, options, &mut |_| {}).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("truncated while it was read") && text.contains("shrinking.bin"),
                "keep {keep}, {threads} lanes: {text}"
            );
        }
    }
    // A later job over a healthy file still works after the guard has fired.
    let path = dir.path().join("healthy.bin");
    std::fs::write(&path, vec![2u8; 8 << 20]).unwrap();
    let mut engine = Digest::new(Framing::Fixed { width: 4 });
    run_input(
        &mut engine,
        &Input::File(path),
        LaneOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(engine.finish().unwrap().records, 2 << 20);
}

#[test]
fn a_file_that_grows_while_mapped_is_read_to_its_length_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("growing.txt");
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let data = text(&mut rng, 10_000);
    std::fs::write(&path, &data).unwrap();
    let input = Input::File(path.clone());
    let source = input.source().unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"\nappended later\n")
        .unwrap();
    let mut engine = Digest::new(Framing::Lines);
    let read = run_source(
        &mut engine,
        source,
        &path,
        LaneOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(read, data.len() as u64);
    assert_eq!(engine.finish().unwrap(), one_shot(&Framing::Lines, &data));
}

#[cfg(target_os = "linux")]
#[test]
fn a_file_not_in_the_page_cache_gives_the_same_state() {
    // Several lanes over an uncached file read it as a stream (one sequential reader); the
    // state must not change with that choice.
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cold.txt");
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let data = text(&mut rng, 200_000);
    std::fs::write(&path, &data).unwrap();
    let expected = one_shot(&Framing::Lines, &data);
    for threads in [1, 2, 3] {
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: a valid descriptor; POSIX_FADV_DONTNEED only drops clean cached pages.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
        let mut engine = Digest::new(Framing::Lines);
        let options = LaneOptions {
            threads,
            chunk_size: 1 << 20,
        };
        let read = run_input(
            &mut engine,
            &Input::File(path.clone()),
            options,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(read, data.len() as u64);
        assert_eq!(engine.finish().unwrap(), expected, "{threads} lanes");
    }
}
