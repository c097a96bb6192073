//! A bounded, deterministic fuzz pass over the wire's framing (stable Rust, part of the normal
//! test suite), from the committed corpus (tests/corpus, made by scripts/make-fuzz-corpus.sh)
//! mutated by the seeded mutator of `inpath_core::fuzz` and fed in random chunks:
//!
//! - the length-prefixed message splitter (`--job-per-message`) must cut exactly the jobs an
//!   independent whole-buffer parser finds, at any chunking;
//! - the unseal transform (the far end of `--unseal`) must answer an error or whole records of
//!   the original text, never other bytes, and never buffer past its page limit.

use inpath_testkit::fuzz::{corpus, Mutator};
use inpath_wire::job::Splitter;
use inpath_wire::transform::{TransformError, TransformFactory, UnsealFactory};
use inpath_wire::JobSplit;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");

/// The reference: messages parsed from the whole buffer at once. Returns the complete jobs,
/// the data of an unfinished one, and the (missing payload, header bytes) at the end.
fn reference(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>, u64, u64) {
    let mut jobs = Vec::new();
    let mut at = 0;
    loop {
        if bytes.len() - at < 4 {
            return (jobs, Vec::new(), 0, (bytes.len() - at) as u64);
        }
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 4;
        if bytes.len() - at < len {
            let part = bytes[at..].to_vec();
            let missing = (len - part.len()) as u64;
            return (jobs, part, missing, 0);
        }
        jobs.push(bytes[at..at + len].to_vec());
        at += len;
        if at == bytes.len() {
            return (jobs, Vec::new(), 0, 0);
        }
    }
}

fn split(bytes: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Vec<u8>, u64, u64) {
    let mut s = Splitter::new(JobSplit::Message);
    let mut jobs = Vec::new();
    let mut current = Vec::new();
    let mut from = 0;
    for &cut in cuts {
        let mut piece = &bytes[from..cut];
        from = cut;
        while !piece.is_empty() {
            let step = s.step(piece);
            assert!(step.consumed <= piece.len() && step.data.end <= step.consumed);
            assert!(step.consumed > 0, "a step must make progress");
            current.extend_from_slice(&piece[step.data]);
            if step.end {
                jobs.push(std::mem::take(&mut current));
            }
            piece = &piece[step.consumed..];
        }
    }
    let close = s.at_close();
    assert_eq!(close.open_job, close.missing > 0 || !current.is_empty());
    (jobs, current, close.missing, close.header_bytes)
}

#[test]
fn message_splitter_matches_a_whole_buffer_parser() {
    let files = corpus(std::path::Path::new(CORPUS)).unwrap();
    let framed: Vec<&[u8]> = files
        .iter()
        .filter(|(n, _)| n.ends_with("message.bin") || n.ends_with("messages.bin"))
        .map(|(_, b)| b.as_slice())
        .collect();
    assert_eq!(framed.len(), 2);
    let mut m = Mutator::new(0x5eed_0005);
    for i in 0..50_000 {
        let bad = m.mutate(framed[i % framed.len()], &framed);
        let cuts = m.cuts(bad.len());
        assert_eq!(split(&bad, &cuts), reference(&bad), "mutation #{i}");
    }
    // The unmutated corpus: whole messages only (1 and 4 of them, one empty).
    let counts: Vec<usize> = framed
        .iter()
        .map(|f| {
            let (jobs, rest, missing, header) = reference(f);
            assert!(rest.is_empty() && missing == 0 && header == 0);
            jobs.len()
        })
        .collect();
    assert_eq!(counts, [4, 1]);
}

#[test]
fn unseal_transform_survives_mutated_streams() {
    let dir = std::path::Path::new(CORPUS);
    let sealed = std::fs::read(dir.join("stream.sealed")).unwrap();
    let plain = std::fs::read(dir.join("stream.plain")).unwrap();
    let keys = std::fs::read(dir.join("../../../inpath-seal/tests/corpus/test-keys.txt")).unwrap();
    let ring = inpath_seal::keyfile::parse_bytes(zeroize::Zeroizing::new(keys))
        .unwrap()
        .ring;
    let factory = UnsealFactory::new(&ring, 1 << 16);
    let open = |bytes: &[u8], cuts: &[usize]| -> Result<Vec<u8>, TransformError> {
        let mut t = factory.make();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts {
            t.push(&bytes[from..cut], &mut out)?;
            from = cut;
        }
        t.finish(&mut out)?;
        Ok(out)
    };
    assert_eq!(open(&sealed, &[sealed.len()]).unwrap(), plain);
    let mut m = Mutator::new(0x5eed_0006);
    let (mut errors, total) = (0, 20_000);
    for i in 0..total {
        let bad = m.mutate(&sealed, &[]);
        let cuts = m.cuts(bad.len());
        match open(&bad, &cuts) {
            Ok(out) => assert!(
                plain.starts_with(&out),
                "mutation #{i} opened to other text"
            ),
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        TransformError::Stream(_)
                            | TransformError::Truncated { .. }
                            | TransformError::RecordTooLarge
                    ),
                    "{e}"
                );
                errors += 1;
            }
        }
    }
    assert!(
        errors * 10 > total * 9,
        "{errors} of {total} mutations caught"
    );
}
