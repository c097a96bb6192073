//! Records around gaps (the lossy tap policy): one [`Aligner`] per tap hands the tap whole
//! records only, so that no record is glued together from bytes before and after a gap.
//!
//! - Fixed-width records (`u32` items, corr rows): the bytes of a record begun before a gap
//!   are dropped, and after the gap the bytes up to the next record boundary (counted from
//!   the job's start, gaps included) are dropped too: records keep their true alignment.
//! - Delimited records (text lines, CSV rows): the line begun before a gap is dropped, and
//!   after the gap everything up to and including the next delimiter.
//! - Plain bytes (`crc`): passed through; the gap is only counted.
//!
//! Until a gap comes, an aligner holds back the start of an unfinished record: fewer than
//! `width` bytes, or a line of up to [`LINE_HOLD`] bytes. At the end of a job it hands over what
//! it holds, so the tap reports a trailing partial record or an unterminated line exactly as
//! without the policy. A line longer than [`LINE_HOLD`] is passed on as it comes; if a gap then
//! cuts it, it is ended at the gap (the tap counts a shortened line, never a glued one).
//! A leaf: the runner gives it the tap as a closure.

/// The longest line start an aligner holds back (longer lines are passed on as they come).
pub(crate) const LINE_HOLD: usize = 64 << 10;

/// How a tap's records are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// Any byte is as good as any other (`crc`).
    Bytes,
    /// Records of this many bytes.
    Fixed(usize),
    /// Records ended by this byte.
    Delimited(u8),
}

/// What an aligner counted over one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct JobCounts {
    /// Bytes that reached the taps but were dropped because a gap cut their record.
    pub cut_bytes: u64,
    /// Bytes handed over as whole fixed-width records.
    pub whole_bytes: u64,
    /// Lines longer than [`LINE_HOLD`] that a gap ended early.
    pub shortened_lines: u64,
}

/// Keeps one tap's records whole around gaps.
#[derive(Debug)]
pub(crate) struct Aligner {
    frame: Frame,
    /// The start of an unfinished record, not yet handed over.
    carry: Vec<u8>,
    /// Fixed width, after a gap: bytes to drop before the next record boundary.
    discard: u64,
    /// Delimited, after a gap: drop up to and including the next delimiter.
    resync: bool,
    /// Delimited: the tap holds the start of a line longer than [`LINE_HOLD`].
    open_line: bool,
    counts: JobCounts,
}

impl Aligner {
    pub fn new(frame: Frame) -> Self {
        Aligner {
            frame,
            carry: Vec::new(),
            discard: 0,
            resync: false,
            open_line: false,
            counts: JobCounts::default(),
        }
    }

    pub fn frame(&self) -> Frame {
        self.frame
    }

    /// The next bytes of the job (after any gap before them).
    pub fn feed(&mut self, data: &[u8], tap: &mut dyn FnMut(&[u8])) {
        match self.frame {
            Frame::Bytes => tap(data),
            Frame::Fixed(width) => self.feed_fixed(data, width, tap),
            Frame::Delimited(delimiter) => self.feed_delimited(data, delimiter, tap),
        }
    }

    fn feed_fixed(&mut self, mut data: &[u8], width: usize, tap: &mut dyn FnMut(&[u8])) {
        if self.discard > 0 {
            let drop = (self.discard.min(data.len() as u64)) as usize;
            self.discard -= drop as u64;
            self.counts.cut_bytes += drop as u64;
            data = &data[drop..];
        }
        if !self.carry.is_empty() {
            let take = (width - self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.carry.len() == width {
                tap(&self.carry);
                self.counts.whole_bytes += width as u64;
                self.carry.clear();
            }
        }
        let whole = data.len() - data.len() % width;
        if whole > 0 {
            tap(&data[..whole]);
            self.counts.whole_bytes += whole as u64;
        }
        self.carry.extend_from_slice(&data[whole..]);
    }

    fn feed_delimited(&mut self, mut data: &[u8], delimiter: u8, tap: &mut dyn FnMut(&[u8])) {
        if self.resync {
            match memchr::memchr(delimiter, data) {
                Some(at) => {
                    self.counts.cut_bytes += at as u64 + 1;
                    data = &data[at + 1..];
                    self.resync = false;
                }
                None => {
                    self.counts.cut_bytes += data.len() as u64;
                    return;
                }
            }
        }
        let rest = match memchr::memrchr(delimiter, data) {
            Some(at) => {
                if !self.carry.is_empty() {
                    tap(&self.carry);
                    self.carry.clear();
                }
                tap(&data[..=at]);
                self.open_line = false;
                &data[at + 1..]
            }
            None => data,
        };
        if rest.is_empty() {
            return;
        }
        if self.open_line {
            tap(rest);
        } else if self.carry.len() + rest.len() > LINE_HOLD {
            if !self.carry.is_empty() {
                tap(&self.carry);
                self.carry.clear();
            }
            tap(rest);
            self.open_line = true;
        } else {
            self.carry.extend_from_slice(rest);
        }
    }

    /// A gap: bytes that the taps never see. `resume_at` is the job-relative position of the
    /// byte after the gap (every byte of the job counts, tapped or not).
    pub fn gap(&mut self, resume_at: u64, tap: &mut dyn FnMut(&[u8])) {
        self.counts.cut_bytes += self.carry.len() as u64;
        self.carry.clear();
        match self.frame {
            Frame::Bytes => {}
            Frame::Fixed(width) => {
                let width = width as u64;
                self.discard = (width - resume_at % width) % width;
            }
            Frame::Delimited(delimiter) => {
                if self.open_line {
                    tap(&[delimiter]);
                    self.open_line = false;
                    self.counts.shortened_lines += 1;
                }
                self.resync = true;
            }
        }
    }

    /// The job ends: hands over the unfinished record it holds (the tap reports it as it would
    /// without the policy), returns the job's counts and starts afresh.
    pub fn end_job(&mut self, tap: &mut dyn FnMut(&[u8])) -> JobCounts {
        if !self.carry.is_empty() {
            tap(&self.carry);
            self.carry.clear();
        }
        self.discard = 0;
        self.resync = false;
        self.open_line = false;
        std::mem::take(&mut self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One piece of a test stream: bytes the taps get, or a gap of that many bytes.
    enum Piece<'a> {
        Data(&'a [u8]),
        Gap(u64),
    }

    /// Runs `pieces` through an aligner as one job; returns what the tap was given, in the
    /// calls it was given in, and the counts.
    fn run(frame: Frame, pieces: &[Piece]) -> (Vec<Vec<u8>>, JobCounts) {
        let mut aligner = Aligner::new(frame);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut at = 0u64;
        for piece in pieces {
            match piece {
                Piece::Data(d) => {
                    aligner.feed(d, &mut |b| got.push(b.to_vec()));
                    at += d.len() as u64;
                }
                Piece::Gap(n) => {
                    at += n;
                    aligner.gap(at, &mut |b| got.push(b.to_vec()));
                }
            }
        }
        let counts = aligner.end_job(&mut |b| got.push(b.to_vec()));
        (got, counts)
    }

    /// u32 records whose value is their index in the stream.
    fn indexed(range: std::ops::Range<u32>) -> Vec<u8> {
        range.flat_map(u32::to_le_bytes).collect()
    }

    fn records(calls: &[Vec<u8>]) -> Vec<u32> {
        let all: Vec<u8> = calls.concat();
        assert_eq!(all.len() % 4, 0);
        all.chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn fixed_width_keeps_true_alignment_around_gaps() {
        let s = indexed(0..100);
        // Records 0..2 whole, record 2 cut by a gap (bytes 10..23 missing), record 5 resumes.
        let (got, counts) = run(
            Frame::Fixed(4),
            &[
                Piece::Data(&s[..5]),
                Piece::Data(&s[5..10]),
                Piece::Gap(13),
                Piece::Data(&s[23..41]),
                Piece::Gap(1),
                Piece::Data(&s[42..44]),
                Piece::Gap(2),
                Piece::Data(&s[46..52]),
            ],
        );
        assert!(got.iter().all(|c| c.len() % 4 == 0), "whole records only");
        assert_eq!(records(&got), vec![0, 1, 6, 7, 8, 9, 12]);
        // Cut: 2 bytes of record 2, 1 of record 5, 1 + 2 of record 10, 2 of record 11.
        assert_eq!(counts.cut_bytes, 2 + 1 + 1 + 2 + 2);
        assert_eq!(counts.whole_bytes, 7 * 4);
    }

    #[test]
    fn fixed_width_without_gaps_is_unchanged_and_leftover_handed_over() {
        let mut s = indexed(0..50);
        s.extend_from_slice(&[1, 2, 3]);
        let pieces: Vec<Piece> = s.chunks(7).map(Piece::Data).collect();
        let (got, counts) = run(Frame::Fixed(4), &pieces);
        assert_eq!(got.concat(), s, "every byte, in order");
        assert_eq!(
            got.last().unwrap(),
            &vec![1, 2, 3],
            "the partial record last"
        );
        assert_eq!(counts.cut_bytes, 0);
        assert_eq!(counts.whole_bytes, 200);
    }

    #[test]
    fn a_gap_ending_on_a_boundary_drops_nothing_after_it() {
        let s = indexed(0..10);
        let (got, counts) = run(
            Frame::Fixed(4),
            &[Piece::Data(&s[..6]), Piece::Gap(6), Piece::Data(&s[12..])],
        );
        assert_eq!(records(&got), vec![0, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(counts.cut_bytes, 2);
    }

    #[test]
    fn lines_are_never_glued_across_a_gap() {
        let text = b"alpha\nbravo\ncharlie\ndelta\necho\nfox";
        let (got, counts) = run(
            Frame::Delimited(b'\n'),
            &[
                Piece::Data(&text[..8]),    // "alpha\nbr"
                Piece::Gap(3),              // "avo" lost
                Piece::Data(&text[11..15]), // "\ncha": the rest of bravo's line
                Piece::Data(&text[15..22]), // "rlie\nde"
                Piece::Gap(2),              // "lt"
                Piece::Data(&text[24..]),   // "a\necho\nfox"
            ],
        );
        assert_eq!(got.concat(), b"alpha\ncharlie\necho\nfox");
        assert_eq!(
            got.last().unwrap(),
            b"fox",
            "the unterminated line at the end"
        );
        assert_eq!(counts.cut_bytes, 2 + 1 + 2 + 2);
    }

    #[test]
    fn a_long_line_cut_by_a_gap_is_ended_there() {
        let long = vec![b'x'; LINE_HOLD + 10];
        let (got, counts) = run(
            Frame::Delimited(b'\n'),
            &[
                Piece::Data(b"a\n"),
                Piece::Data(&long),
                Piece::Gap(5),
                Piece::Data(b"yy\nb\n"),
            ],
        );
        let mut want = b"a\n".to_vec();
        want.extend_from_slice(&long);
        want.extend_from_slice(b"\nb\n");
        assert_eq!(got.concat(), want);
        assert_eq!(counts.shortened_lines, 1);
        assert_eq!(counts.cut_bytes, 3);
    }

    #[test]
    fn plain_bytes_pass_and_the_next_job_starts_clean() {
        let (got, counts) = run(
            Frame::Bytes,
            &[Piece::Data(b"abc"), Piece::Gap(4), Piece::Data(b"de")],
        );
        assert_eq!(got.concat(), b"abcde");
        assert_eq!(counts, JobCounts::default());
        let mut a = Aligner::new(Frame::Fixed(4));
        a.feed(b"12", &mut |_| {});
        a.gap(5, &mut |_| {});
        let counts = a.end_job(&mut |_| {});
        assert_eq!(counts.cut_bytes, 2);
        let mut got = Vec::new();
        a.feed(b"abcd", &mut |b| got.extend_from_slice(b));
        assert_eq!(got, b"abcd", "no discard carried into the next job");
    }
}
