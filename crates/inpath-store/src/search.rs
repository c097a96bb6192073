//! Search kernels: a literal (`memchr::memmem`) and a line-oriented regular expression.
//!
//! **Literal** ([`Literal`]): every occurrence of a byte string, overlapping ones included
//! (`aa` occurs 3 times in `aaaa`), found across page and lane boundaries; the result holds the
//! number of matches, the number of lines that hold at least one match start (what `grep -c
//! -F` counts, for patterns without a newline), and optionally the byte offset of every match.
//! Its offsets equal `grep -b -o -F` for patterns whose occurrences do not overlap; where they
//! overlap, grep reports the leftmost non-overlapping ones and this kernel all of them.
//!
//! **Regex** ([`RegexSearch`], the `regex` crate's syntax): line by line as `grep` does, the
//! pattern matched against each line without its `\n`. It counts the lines with a match (as
//! `grep -c`) and optionally gives the offset of every non-empty, non-overlapping match,
//! leftmost-first, within each line (as `grep -b -o`, which also skips empty matches). A final
//! line without `\n` is a line; the empty string after a final `\n` is not. grep's POSIX
//! leftmost-longest rule can choose a longer alternative than the `regex` crate's
//! leftmost-first one (`a|ab`), so `-o` offsets agree for patterns where the two rules do.

use crate::kernel::{Flow, Kernel, Partial, Scan};
use memchr::memmem::Finder;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Literal search for one byte string.
#[derive(Clone, Debug)]
pub struct Literal {
    finder: Finder<'static>,
    offsets: bool,
}

impl Literal {
    /// A search for `pattern` (not empty); `offsets` keeps the offset of every match.
    pub fn new(pattern: &[u8], offsets: bool) -> crate::Result<Literal> {
        if pattern.is_empty() {
            return Err(crate::StoreError::parameter(
                "pattern",
                "\"\"",
                "at least one byte",
            ));
        }
        Ok(Literal {
            finder: Finder::new(pattern).into_owned(),
            offsets,
        })
    }

    fn len(&self) -> u64 {
        self.finder.needle().len() as u64
    }
}

/// The result of a literal search (or of a range of lanes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiteralHits {
    /// Matches, overlapping ones included.
    pub matches: u64,
    /// Lines holding at least one match start.
    pub lines: u64,
    /// Offset of every match, increasing (empty unless offsets were asked for).
    pub offsets: Vec<u64>,
    /// Lane bookkeeping for merging line counts: whether the range holds a `\n`.
    pub has_newline: bool,
    /// Whether the first match's line started before the range (no `\n` before it in range).
    pub first_line_continues: bool,
    /// Whether the last match's line goes on past the range (no `\n` after it in range).
    pub last_line_open: bool,
}

impl Partial for LiteralHits {
    fn merge(mut self, later: LiteralHits) -> LiteralHits {
        let joined = self.last_line_open && later.first_line_continues && later.matches > 0;
        let a_has = self.matches > 0;
        let b_has = later.matches > 0;
        let first_line_continues = if a_has {
            self.first_line_continues
        } else {
            !self.has_newline && later.first_line_continues
        };
        let last_line_open = if b_has {
            later.last_line_open
        } else {
            a_has && self.last_line_open && !later.has_newline
        };
        self.matches += later.matches;
        self.lines = self.lines + later.lines - joined as u64;
        self.offsets.extend(later.offsets);
        LiteralHits {
            has_newline: self.has_newline || later.has_newline,
            first_line_continues,
            last_line_open,
            ..self
        }
    }
}

/// The lane state of a [`Literal`] search.
#[derive(Debug)]
pub struct LiteralScan {
    kernel: Literal,
    own: Range<u64>,
    /// The last `len − 1` bytes seen, then the current chunk.
    buf: Vec<u8>,
    buf_start: u64,
    hits: LiteralHits,
    /// The `\n` that ends the last counted line: `Some(u64::MAX)` while not yet seen.
    line_end: Option<u64>,
    /// Where the search for that `\n` resumes while it is open.
    line_checked: u64,
    /// Owned bytes below this were looked at for `has_newline`.
    nl_checked: u64,
}

const OPEN: u64 = u64::MAX;

impl Kernel for Literal {
    type Partial = LiteralHits;
    type Scan = LiteralScan;

    fn reach(&self, own: Range<u64>, size: u64) -> Range<u64> {
        own.start..(own.end + self.len() - 1).min(size).max(own.start)
    }

    fn scan(&self, own: Range<u64>, _size: u64) -> LiteralScan {
        LiteralScan {
            kernel: self.clone(),
            buf: Vec::new(),
            buf_start: own.start,
            hits: LiteralHits::default(),
            line_end: None,
            line_checked: own.start,
            nl_checked: own.start,
            own,
        }
    }
}

impl LiteralScan {
    /// Position of the first `\n` in owned bytes `from..` of the buffer.
    fn newline_from(&self, from: u64) -> Option<u64> {
        let hi = (self.buf_start + self.buf.len() as u64).min(self.own.end);
        if from >= hi {
            return None;
        }
        let lo = (from - self.buf_start) as usize;
        let hi = (hi - self.buf_start) as usize;
        memchr::memchr(b'\n', &self.buf[lo..hi]).map(|i| from + i as u64)
    }

    fn on_match(&mut self, p: u64) {
        self.hits.matches += 1;
        if self.kernel.offsets {
            self.hits.offsets.push(p);
        }
        if self.hits.matches == 1 {
            let before = self.hits.has_newline || {
                let lo = self.nl_checked.max(self.buf_start);
                lo < p && {
                    let a = (lo - self.buf_start) as usize;
                    let b = (p - self.buf_start) as usize;
                    memchr::memchr(b'\n', &self.buf[a..b]).is_some()
                }
            };
            self.hits.first_line_continues = !before;
        }
        if self.line_end.is_some_and(|q| p <= q) {
            return; // the same line as the last counted match
        }
        self.hits.lines += 1;
        let buf_end = (self.buf_start + self.buf.len() as u64).min(self.own.end);
        self.line_end = Some(self.newline_from(p).unwrap_or(OPEN));
        self.line_checked = buf_end;
    }
}

impl Scan for LiteralScan {
    type Partial = LiteralHits;

    fn feed(&mut self, offset: u64, bytes: &[u8]) -> Flow {
        let m = self.kernel.len() as usize;
        debug_assert_eq!(offset, self.buf_start + self.buf.len() as u64);
        self.buf.extend_from_slice(bytes);
        let buf_end = self.buf_start + self.buf.len() as u64;
        // A counted line still open: look for its end in the new bytes.
        if self.line_end == Some(OPEN) {
            if let Some(q) = self.newline_from(self.line_checked) {
                self.line_end = Some(q);
            }
            self.line_checked = buf_end.min(self.own.end);
        }
        let mut pos = 0usize;
        while let Some(i) = self.kernel.finder.find(&self.buf[pos..]) {
            let p = self.buf_start + (pos + i) as u64;
            if p >= self.own.end {
                break;
            }
            self.on_match(p);
            pos += i + 1;
        }
        if !self.hits.has_newline {
            let hi = buf_end.min(self.own.end);
            if let Some(q) = self.newline_from(self.nl_checked) {
                debug_assert!(q < hi);
                self.hits.has_newline = true;
            }
            self.nl_checked = hi.max(self.nl_checked);
        }
        // Keep the last m − 1 bytes: a match starting there ends in the next chunk.
        let keep = (m - 1).min(self.buf.len());
        let drop = self.buf.len() - keep;
        self.buf.drain(..drop);
        self.buf_start += drop as u64;
        if buf_end >= self.own.end + m as u64 - 1 {
            Flow::Done
        } else {
            Flow::More
        }
    }

    fn finish(mut self) -> LiteralHits {
        self.hits.last_line_open = self.hits.matches > 0 && self.line_end == Some(OPEN);
        self.hits
    }
}

/// Line-oriented regular-expression search (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct RegexSearch {
    regex: regex::bytes::Regex,
    offsets: bool,
}

impl RegexSearch {
    /// A search for `pattern` (the `regex` crate's syntax); `offsets` keeps match offsets.
    pub fn new(pattern: &str, offsets: bool) -> crate::Result<RegexSearch> {
        let regex = regex::bytes::Regex::new(pattern).map_err(|e| {
            crate::StoreError::parameter("regex", pattern, &format!("a valid pattern: {e}"))
        })?;
        Ok(RegexSearch { regex, offsets })
    }
}

/// The result of a regex search.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegexHits {
    /// Lines with a match (`grep -c`).
    pub lines: u64,
    /// Non-empty matches (counted only when offsets were asked for).
    pub matches: u64,
    /// Offset of every non-empty match, increasing (empty unless offsets were asked for).
    pub offsets: Vec<u64>,
    /// Length of every match, beside `offsets`.
    pub lengths: Vec<u64>,
}

impl Partial for RegexHits {
    fn merge(mut self, later: RegexHits) -> RegexHits {
        self.lines += later.lines;
        self.matches += later.matches;
        self.offsets.extend(later.offsets);
        self.lengths.extend(later.lengths);
        self
    }
}

/// The lane state of a [`RegexSearch`]: owns the lines that start inside its range.
#[derive(Debug)]
pub struct RegexScan {
    kernel: RegexSearch,
    own: Range<u64>,
    /// Start of the line being collected; `None` while skipping to the first owned line.
    line_start: Option<u64>,
    line: Vec<u8>,
    hits: RegexHits,
}

impl Kernel for RegexSearch {
    type Partial = RegexHits;
    type Scan = RegexScan;

    fn reach(&self, own: Range<u64>, size: u64) -> Range<u64> {
        if own.is_empty() {
            return own.start..own.start;
        }
        own.start.saturating_sub(1)..size
    }

    fn scan(&self, own: Range<u64>, _size: u64) -> RegexScan {
        RegexScan {
            kernel: self.clone(),
            line_start: (own.start == 0).then_some(0),
            own,
            line: Vec::new(),
            hits: RegexHits::default(),
        }
    }
}

impl RegexScan {
    fn line(&mut self, start: u64, line: &[u8]) {
        if self.kernel.offsets {
            let before = self.hits.matches;
            for m in self.kernel.regex.find_iter(line) {
                if !m.is_empty() {
                    self.hits.matches += 1;
                    self.hits.offsets.push(start + m.start() as u64);
                    self.hits.lengths.push(m.len() as u64);
                }
            }
            // A line whose only matches are empty still counts, as for grep -c.
            if self.hits.matches > before || self.kernel.regex.is_match(line) {
                self.hits.lines += 1;
            }
        } else if self.kernel.regex.is_match(line) {
            self.hits.lines += 1;
        }
    }
}

impl Scan for RegexScan {
    type Partial = RegexHits;

    fn feed(&mut self, offset: u64, bytes: &[u8]) -> Flow {
        let mut cur = 0usize;
        while cur < bytes.len() {
            match self.line_start {
                None => match memchr::memchr(b'\n', &bytes[cur..]) {
                    Some(i) => {
                        let next = offset + (cur + i) as u64 + 1;
                        if next < self.own.start {
                            cur += i + 1;
                            continue;
                        }
                        if next >= self.own.end {
                            return Flow::Done;
                        }
                        self.line_start = Some(next);
                        cur += i + 1;
                    }
                    None => return Flow::More,
                },
                Some(start) => match memchr::memchr(b'\n', &bytes[cur..]) {
                    Some(i) => {
                        if self.line.is_empty() {
                            self.line(start, &bytes[cur..cur + i]);
                        } else {
                            let mut line = std::mem::take(&mut self.line);
                            line.extend_from_slice(&bytes[cur..cur + i]);
                            self.line(start, &line);
                            line.clear();
                            self.line = line;
                        }
                        let next = offset + (cur + i) as u64 + 1;
                        cur += i + 1;
                        if next >= self.own.end {
                            self.line_start = None;
                            return Flow::Done;
                        }
                        self.line_start = Some(next);
                    }
                    None => {
                        self.line.extend_from_slice(&bytes[cur..]);
                        return Flow::More;
                    }
                },
            }
        }
        Flow::More
    }

    fn finish(mut self) -> RegexHits {
        if let Some(start) = self.line_start {
            if !self.line.is_empty() && start < self.own.end {
                let line = std::mem::take(&mut self.line);
                self.line(start, &line);
            }
        }
        self.hits
    }
}
