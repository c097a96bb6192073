//! Where jobs end. By default a job is a connection (its close is the hardware's `last` flag);
//! optionally a job ends every N bytes, or a job is one length-prefixed message.

use crate::{Result, WireError};

/// How a tapped byte stream is cut into jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobSplit {
    /// One job per connection and direction (default).
    Connection,
    /// A job ends after every `N` bytes (and at the close, with what is left).
    Bytes(u64),
    /// Each message is a job: a 4-byte big-endian length, then that many payload bytes. The
    /// taps see only the payloads.
    Message,
}

impl JobSplit {
    /// A `Bytes` split; `n` must be at least 1.
    pub fn bytes(n: u64) -> Result<Self> {
        if n == 0 {
            return Err(WireError::Setting {
                name: "job-bytes",
                value: "0".into(),
                valid: "1 byte or more".into(),
            });
        }
        Ok(JobSplit::Bytes(n))
    }

    /// The name used in JSON.
    pub fn name(&self) -> &'static str {
        match self {
            JobSplit::Connection => "connection",
            JobSplit::Bytes(_) => "bytes",
            JobSplit::Message => "message",
        }
    }
}

/// One step of [`Splitter::step`]: `consumed` input bytes, of which `data` (a range within the
/// input) belongs to the current job; then, if `end`, the job ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Input bytes used by this step.
    pub consumed: usize,
    /// The part of the input that is job data.
    pub data: std::ops::Range<usize>,
    /// Whether the current job ends after `data`.
    pub end: bool,
}

/// Cuts a chunked stream into jobs.
#[derive(Clone, Debug)]
pub struct Splitter {
    split: JobSplit,
    /// Data bytes in the current job.
    in_job: u64,
    header: [u8; 4],
    header_len: usize,
    /// Payload bytes still expected for the current message (`None`: reading a header).
    remaining: Option<u64>,
}

impl Splitter {
    /// A splitter at the start of a stream.
    pub fn new(split: JobSplit) -> Self {
        Splitter {
            split,
            in_job: 0,
            header: [0; 4],
            header_len: 0,
            remaining: None,
        }
    }

    /// Data bytes in the current job so far.
    pub fn in_job(&self) -> u64 {
        self.in_job
    }

    /// Takes the next step over `input` (non-empty).
    pub fn step(&mut self, input: &[u8]) -> Step {
        match self.split {
            JobSplit::Connection => {
                self.in_job += input.len() as u64;
                Step {
                    consumed: input.len(),
                    data: 0..input.len(),
                    end: false,
                }
            }
            JobSplit::Bytes(n) => {
                let take = (n - self.in_job).min(input.len() as u64) as usize;
                self.in_job += take as u64;
                let end = self.in_job == n;
                if end {
                    self.in_job = 0;
                }
                Step {
                    consumed: take,
                    data: 0..take,
                    end,
                }
            }
            JobSplit::Message => match self.remaining {
                None => {
                    let take = (4 - self.header_len).min(input.len());
                    self.header[self.header_len..self.header_len + take]
                        .copy_from_slice(&input[..take]);
                    self.header_len += take;
                    let mut end = false;
                    if self.header_len == 4 {
                        self.header_len = 0;
                        let len = u32::from_be_bytes(self.header) as u64;
                        if len == 0 {
                            end = true;
                        } else {
                            self.remaining = Some(len);
                        }
                    }
                    Step {
                        consumed: take,
                        data: 0..0,
                        end,
                    }
                }
                Some(remaining) => {
                    let take = remaining.min(input.len() as u64) as usize;
                    self.in_job += take as u64;
                    let left = remaining - take as u64;
                    let end = left == 0;
                    if end {
                        self.remaining = None;
                        self.in_job = 0;
                    } else {
                        self.remaining = Some(left);
                    }
                    Step {
                        consumed: take,
                        data: 0..take,
                        end,
                    }
                }
            },
        }
    }

    /// Passes over `len` bytes the taps never saw (a gap under the lossy tap policy): returns
    /// how many of them belong to the current job and whether the job ends after them. Byte
    /// positions stay exact, so `--job-bytes` jobs end where they would have. Message framing
    /// is not followed through a gap (the lossy policy refuses `--job-per-message`: a gap over
    /// a header would lose every later boundary); here a message split skips like a connection.
    pub fn skip(&mut self, len: u64) -> (u64, bool) {
        match self.split {
            JobSplit::Bytes(n) => {
                let take = (n - self.in_job).min(len);
                self.in_job += take;
                let end = self.in_job == n;
                if end {
                    self.in_job = 0;
                }
                (take, end)
            }
            JobSplit::Connection | JobSplit::Message => {
                self.in_job += len;
                (len, false)
            }
        }
    }

    /// At the end of the stream: whether an unfinished job is open (it has data, or a message
    /// header announced it), the payload bytes a message still lacked, and the bytes of an
    /// incomplete message header.
    pub fn at_close(&self) -> Close {
        match self.split {
            JobSplit::Message => Close {
                open_job: self.remaining.is_some(),
                missing: self.remaining.unwrap_or(0),
                header_bytes: self.header_len as u64,
            },
            _ => Close {
                open_job: self.in_job > 0,
                missing: 0,
                header_bytes: 0,
            },
        }
    }
}

/// The state of a [`Splitter`] when its stream closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    /// A job has started and not ended.
    pub open_job: bool,
    /// Payload bytes the last message announced but did not deliver.
    pub missing: u64,
    /// Bytes of a message header that was cut off.
    pub header_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `input` through a splitter in chunks of `chunk` bytes; returns the jobs' data.
    fn jobs(split: JobSplit, input: &[u8], chunk: usize) -> (Vec<Vec<u8>>, Close) {
        let mut s = Splitter::new(split);
        let mut out = vec![Vec::new()];
        for mut piece in input.chunks(chunk) {
            while !piece.is_empty() {
                let step = s.step(piece);
                out.last_mut().unwrap().extend_from_slice(&piece[step.data]);
                if step.end {
                    out.push(Vec::new());
                }
                piece = &piece[step.consumed..];
            }
        }
        (out, s.at_close())
    }

    #[test]
    fn bytes_split_any_chunking() {
        let input: Vec<u8> = (0..100u8).collect();
        for chunk in [1, 3, 7, 100] {
            let (out, close) = jobs(JobSplit::Bytes(30), &input, chunk);
            assert_eq!(out.len(), 4);
            assert_eq!(out[0], (0..30).collect::<Vec<u8>>());
            assert_eq!(out[3], (90..100).collect::<Vec<u8>>());
            assert!(close.open_job);
        }
        let (out, close) = jobs(JobSplit::Bytes(50), &input, 9);
        assert_eq!(out.len(), 3);
        assert!(out[2].is_empty());
        assert!(!close.open_job);
    }

    #[test]
    fn skipped_bytes_keep_job_boundaries() {
        let mut s = Splitter::new(JobSplit::Bytes(10));
        assert_eq!(s.step(&[0; 4]).consumed, 4);
        assert_eq!(s.skip(25), (6, true));
        assert_eq!(s.skip(19), (10, true));
        assert_eq!(s.skip(9), (9, false));
        let step = s.step(&[0; 3]);
        assert_eq!((step.consumed, step.end), (1, true));
        let mut s = Splitter::new(JobSplit::Connection);
        assert_eq!(s.skip(7), (7, false));
        assert!(s.at_close().open_job);
    }

    #[test]
    fn messages_any_chunking() {
        let mut input = Vec::new();
        for payload in [&b"hello"[..], b"", b"world!!"] {
            input.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            input.extend_from_slice(payload);
        }
        input.extend_from_slice(&[0, 0, 0, 9, b'a', b'b']);
        for chunk in [1, 2, 5, 64] {
            let (out, close) = jobs(JobSplit::Message, &input, chunk);
            assert_eq!(out[..3], [b"hello".to_vec(), vec![], b"world!!".to_vec()]);
            assert_eq!(out[3], b"ab");
            assert_eq!(
                close,
                Close {
                    open_job: true,
                    missing: 7,
                    header_bytes: 0
                }
            );
        }
        let (_, close) = jobs(JobSplit::Message, &[0, 0], 1);
        assert_eq!(close.header_bytes, 2);
        assert!(JobSplit::bytes(0).is_err());
    }
}
