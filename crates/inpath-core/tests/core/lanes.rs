//! Lanes: a job split across threads gives the same state as one lane, for any chunk size.

use inpath_core::{run_reader, run_slice, Engine, Error, Framing, LaneOptions};
use rand::{Rng, SeedableRng};

use crate::common::{text, Digest};

#[test]
fn any_lane_count_and_chunk_size_gives_the_same_state() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let binary: Vec<u8> = (0..400_000).map(|_| rng.gen()).collect();
    let lines = text(&mut rng, 20_000);
    for (framing, data) in [
        (Framing::Fixed { width: 4 }, &binary),
        (Framing::Lines, &lines),
    ] {
        let mut reference = Digest::new(framing.clone());
        reference.update(data).unwrap();
        let expected = reference.finish().unwrap();
        for threads in [1, 2, 3, 8] {
            let mut engine = Digest::new(framing.clone());
            run_slice(&mut engine, data, threads).unwrap();
            assert_eq!(
                engine.finish().unwrap(),
                expected,
                "run_slice {threads} lanes"
            );
            for chunk_size in [4096, 10_000, 1 << 20] {
                let mut engine = Digest::new(framing.clone());
                let mut reader: &[u8] = data;
                let options = LaneOptions {
                    threads,
                    chunk_size,
                };
                run_reader(
                    &mut engine,
                    &mut reader,
                    "mem".as_ref(),
                    options,
                    &mut |_| {},
                )
                .unwrap();
                assert_eq!(
                    engine.finish().unwrap(),
                    expected,
                    "run_reader {threads} lanes, {chunk_size}"
                );
            }
        }
    }
}

#[test]
fn trailing_bytes_are_reported_by_every_runner() {
    let data = vec![0u8; 4 * 10_000 + 3];
    for threads in [1, 2, 4] {
        let mut engine = Digest::new(Framing::Fixed { width: 4 });
        let err = run_slice(&mut engine, &data, threads).unwrap_err();
        assert!(
            matches!(
                err,
                Error::TrailingBytes {
                    trailing: 3,
                    complete: 10_000,
                    ..
                }
            ),
            "{err}"
        );
        let mut engine = Digest::new(Framing::Fixed { width: 4 });
        let mut reader: &[u8] = &data;
        let options = LaneOptions {
            threads,
            chunk_size: 4096,
        };
        let err = run_reader(
            &mut engine,
            &mut reader,
            "mem".as_ref(),
            options,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::TrailingBytes {
                    trailing: 3,
                    complete: 10_000,
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn thread_count_is_checked() {
    let mut engine = Digest::new(Framing::Lines);
    assert!(matches!(
        run_slice(&mut engine, b"x", 0).unwrap_err(),
        Error::Parameter { .. }
    ));
    assert!(matches!(
        run_slice(&mut engine, b"x", 100_000).unwrap_err(),
        Error::Parameter { .. }
    ));
}

#[test]
fn read_errors_name_the_input() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    for threads in [1, 2] {
        let mut engine = Digest::new(Framing::Lines);
        let options = LaneOptions {
            threads,
            chunk_size: 4096,
        };
        let err = run_reader(
            &mut engine,
            &mut Failing,
            "broken.txt".as_ref(),
            options,
            &mut |_| {},
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("broken.txt") && text.contains("disk on fire"),
            "{text}"
        );
    }
}
