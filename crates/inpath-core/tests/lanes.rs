//! Lanes: a job split across threads gives the same state as one lane, for any chunk size.

use inpath_core::{
    run_reader, run_slice, Deframer, Engine, Error, Framing, Lane, LaneOptions, RecordSink, Result,
};
use rand::{Rng, SeedableRng};

/// A mergeable engine: the multiset of records as (sum of bytes, count, xor of FNV hashes).
#[derive(Debug)]
struct Digest {
    deframer: Deframer,
    state: State,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct State {
    records: u64,
    byte_sum: u64,
    hash_sum: u64,
}

impl RecordSink for State {
    fn fixed(&mut self, records: &[u8]) -> Result<()> {
        for record in records.chunks(4) {
            self.value(0, record)?;
        }
        Ok(())
    }
    fn value(&mut self, _column: usize, value: &[u8]) -> Result<()> {
        self.records += 1;
        self.byte_sum += value.iter().map(|&b| b as u64).sum::<u64>();
        let fnv = value.iter().fold(0xcbf29ce484222325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        self.hash_sum = self.hash_sum.wrapping_add(fnv);
        Ok(())
    }
}

impl Digest {
    fn new(framing: Framing) -> Self {
        Digest {
            deframer: Deframer::new(framing).unwrap(),
            state: State::default(),
        }
    }
}

impl Engine for Digest {
    type Output = State;
    fn update(&mut self, chunk: &[u8]) -> Result<()> {
        self.deframer.feed(chunk, &mut self.state)
    }
    fn finish(&mut self) -> Result<State> {
        self.close_input()?;
        Ok(std::mem::take(&mut self.state))
    }
}

impl Lane for Digest {
    fn framing(&self) -> &Framing {
        self.deframer.framing()
    }
    fn fork(&self) -> Self {
        Digest::new(self.deframer.framing().clone())
    }
    fn close_input(&mut self) -> Result<()> {
        self.deframer.close(&mut self.state)
    }
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.state.records += other.state.records;
        self.state.byte_sum += other.state.byte_sum;
        self.state.hash_sum = self.state.hash_sum.wrapping_add(other.state.hash_sum);
        Ok(())
    }
}

fn text(rng: &mut impl Rng, lines: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..lines {
        let len = rng.gen_range(0..40);
        out.extend((0..len).map(|_| rng.gen_range(b'a'..=b'z')));
        out.push(b'\n');
    }
    out.extend_from_slice(b"unterminated");
    out
}

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
