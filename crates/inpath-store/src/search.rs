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

/// The lane state of a [`Literal`] search. Chunks are searched where they lie (no copy);
/// only the last `len − 1` bytes of a chunk are kept, for matches that end in the next one.
#[derive(Debug)]
pub struct LiteralScan {
    kernel: Literal,
    own: Range<u64>,
    /// The last (up to) `len − 1` bytes before the next chunk, and where they start.
    carry: Vec<u8>,
    carry_start: u64,
    /// The carry followed by the first `len − 1` bytes of a chunk (matches across the edge).
    edge: Vec<u8>,
    hits: LiteralHits,
    /// The first `\n` in the owned bytes, once seen, and how far it was looked for.
    first_nl: Option<u64>,
    nl_checked: u64,
    /// The `\n` that ends the last counted line (`Some(OPEN)` while not yet seen).
    line_end: Option<u64>,
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
            carry: Vec::new(),
            carry_start: own.start,
            edge: Vec::new(),
            hits: LiteralHits::default(),
            first_nl: None,
            nl_checked: own.start,
            line_end: None,
            own,
        }
    }
}

/// Where the bytes around a match are: the chunk (at `offset`, owned up to `owned_hi`) and the
/// carry before it.
struct View<'a> {
    carry: &'a [u8],
    carry_start: u64,
    bytes: &'a [u8],
    offset: u64,
    owned_hi: u64,
}

impl View<'_> {
    /// The first `\n` at or after `p` in owned bytes seen so far.
    fn newline_after(&self, p: u64) -> Option<u64> {
        let mut from = 0usize;
        if p < self.offset {
            let hi = self.offset.min(self.owned_hi);
            if p < hi {
                let a = (p - self.carry_start) as usize;
                let b = (hi - self.carry_start) as usize;
                if let Some(i) = memchr::memchr(b'\n', &self.carry[a..b]) {
                    return Some(p + i as u64);
                }
            }
        } else {
            from = (p - self.offset) as usize;
        }
        let hi = self.owned_hi.saturating_sub(self.offset) as usize;
        if from >= hi {
            return None;
        }
        memchr::memchr(b'\n', &self.bytes[from..hi]).map(|i| self.offset + (from + i) as u64)
    }
}

impl LiteralScan {
    fn on_match(&mut self, p: u64, view: &View<'_>) {
        self.hits.matches += 1;
        if self.kernel.offsets {
            self.hits.offsets.push(p);
        }
        if self.hits.matches == 1 {
            // The owned bytes up to the end of this chunk were searched for the first `\n`.
            self.hits.first_line_continues = self.first_nl.is_none_or(|q| q >= p);
        }
        if self.line_end.is_some_and(|q| p <= q) {
            return; // the same line as the last counted match
        }
        self.hits.lines += 1;
        self.line_end = Some(view.newline_after(p).unwrap_or(OPEN));
    }
}

impl Scan for LiteralScan {
    type Partial = LiteralHits;

    fn feed(&mut self, offset: u64, bytes: &[u8]) -> Flow {
        let m = self.kernel.len() as usize;
        debug_assert_eq!(offset, self.carry_start + self.carry.len() as u64);
        let end = offset + bytes.len() as u64;
        let owned_hi = end.min(self.own.end).max(offset);
        let owned = &bytes[..(owned_hi - offset) as usize];
        // The first `\n` of the owned range (for merging line counts across lanes).
        if self.first_nl.is_none() && self.nl_checked < owned_hi {
            let from = (self.nl_checked.max(offset) - offset) as usize;
            self.first_nl =
                memchr::memchr(b'\n', &owned[from..]).map(|i| offset + (from + i) as u64);
            self.nl_checked = owned_hi;
        }
        // A counted line still open ends at the first `\n` of the new bytes.
        if self.line_end == Some(OPEN) {
            if let Some(i) = memchr::memchr(b'\n', owned) {
                self.line_end = Some(offset + i as u64);
            }
        }
        let carry = std::mem::take(&mut self.carry);
        let view = View {
            carry: &carry,
            carry_start: self.carry_start,
            bytes,
            offset,
            owned_hi,
        };
        // Matches that start in the carry and end in this chunk.
        if !carry.is_empty() {
            let mut edge = std::mem::take(&mut self.edge);
            edge.clear();
            edge.extend_from_slice(&carry);
            edge.extend_from_slice(&bytes[..(m - 1).min(bytes.len())]);
            let mut pos = 0usize;
            while let Some(i) = self.kernel.finder.find(&edge[pos..]) {
                let at = pos + i;
                let p = self.carry_start + at as u64;
                if at >= carry.len() || p >= self.own.end {
                    break;
                }
                self.on_match(p, &view);
                pos = at + 1;
            }
            self.edge = edge;
        }
        // Matches inside the chunk, searched in place.
        let mut pos = 0usize;
        while let Some(i) = self.kernel.finder.find(&bytes[pos..]) {
            let p = offset + (pos + i) as u64;
            if p >= self.own.end {
                break;
            }
            self.on_match(p, &view);
            pos += i + 1;
        }
        // Keep the last m − 1 bytes: a match starting there ends in the next chunk.
        let keep = m - 1;
        let mut carry = carry;
        if bytes.len() >= keep {
            carry.clear();
            carry.extend_from_slice(&bytes[bytes.len() - keep..]);
        } else {
            carry.extend_from_slice(bytes);
            let extra = carry.len().saturating_sub(keep);
            carry.drain(..extra);
        }
        self.carry_start = end - carry.len() as u64;
        self.carry = carry;
        if end >= self.own.end + m as u64 - 1 {
            Flow::Done
        } else {
            Flow::More
        }
    }

    fn finish(mut self) -> LiteralHits {
        self.hits.has_newline = self.first_nl.is_some();
        self.hits.last_line_open = self.hits.matches > 0 && self.line_end == Some(OPEN);
        self.hits
    }
}

/// Line-oriented regular-expression search (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct RegexSearch {
    regex: regex::bytes::Regex,
    /// The same pattern with `^`/`$` at line ends, run over whole blocks of lines to find the
    /// lines worth matching (as ripgrep does); `None` where the pattern's meaning could differ
    /// between a block and a line (`\A`, `\z`, inline flags), and every line is matched alone.
    candidate: Option<regex::bytes::Regex>,
    offsets: bool,
}

impl RegexSearch {
    /// A search for `pattern` (the `regex` crate's syntax); `offsets` keeps match offsets.
    pub fn new(pattern: &str, offsets: bool) -> crate::Result<RegexSearch> {
        let regex = regex::bytes::Regex::new(pattern).map_err(|e| {
            crate::StoreError::parameter("regex", pattern, &format!("a valid pattern: {e}"))
        })?;
        let plain = !["\\A", "\\z", "(?"].iter().any(|t| pattern.contains(t));
        let candidate = plain
            .then(|| {
                regex::bytes::RegexBuilder::new(pattern)
                    .multi_line(true)
                    .build()
                    .ok()
            })
            .flatten();
        Ok(RegexSearch {
            regex,
            candidate,
            offsets,
        })
    }

    /// A search that matches every line alone (the reference the block search is tested
    /// against).
    pub fn line_by_line(pattern: &str, offsets: bool) -> crate::Result<RegexSearch> {
        Ok(RegexSearch {
            candidate: None,
            ..RegexSearch::new(pattern, offsets)?
        })
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
    /// Counts line `line` (without its `\n`, starting at file offset `start`) if it matches.
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

    /// A line known to match: counted, and its matches found when offsets are kept.
    fn matched_line(&mut self, start: u64, line: &[u8]) {
        if self.kernel.offsets {
            self.line(start, line);
        } else {
            self.hits.lines += 1;
        }
    }

    /// Whole lines, each ending with `\n`, the first at file offset `base`.
    fn block(&mut self, base: u64, block: &[u8]) {
        let Some(candidate) = self.kernel.candidate.clone() else {
            let mut pos = 0usize;
            while let Some(i) = memchr::memchr(b'\n', &block[pos..]) {
                self.line(base + pos as u64, &block[pos..pos + i]);
                pos += i + 1;
            }
            return;
        };
        // Search the block at once; a match shows a line worth looking at. A line that
        // matches alone has a match in the block starting no later (line ends are `^`/`$` in
        // both), so no line is missed; a match that runs past its line's `\n` is checked
        // against that line alone.
        let mut pos = 0usize;
        while pos < block.len() {
            let Some(m) = candidate.find_at(block, pos) else {
                break;
            };
            let s = m.start();
            if s >= block.len() {
                break;
            }
            let ls = memchr::memrchr(b'\n', &block[pos..s]).map_or(pos, |i| pos + i + 1);
            let Some(le) = memchr::memchr(b'\n', &block[s..]).map(|i| s + i) else {
                break;
            };
            let line = &block[ls..le];
            if m.end() <= le {
                self.matched_line(base + ls as u64, line);
            } else {
                self.line(base + ls as u64, line);
            }
            pos = le + 1;
        }
    }
}

impl Scan for RegexScan {
    type Partial = RegexHits;

    fn feed(&mut self, offset: u64, bytes: &[u8]) -> Flow {
        let mut cur = 0usize;
        // Skip to the first line this lane owns: the one after the first `\n` at or after the
        // byte before the range.
        while self.line_start.is_none() {
            let Some(i) = memchr::memchr(b'\n', &bytes[cur..]) else {
                return Flow::More;
            };
            let next = offset + (cur + i) as u64 + 1;
            cur += i + 1;
            if next < self.own.start {
                continue;
            }
            if next >= self.own.end {
                return Flow::Done;
            }
            self.line_start = Some(next);
        }
        let start = self.line_start.expect("set above");
        // A line begun in an earlier chunk.
        if !self.line.is_empty() {
            let Some(i) = memchr::memchr(b'\n', &bytes[cur..]) else {
                self.line.extend_from_slice(&bytes[cur..]);
                return Flow::More;
            };
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(&bytes[cur..cur + i]);
            self.line(start, &line);
            line.clear();
            self.line = line;
            let next = offset + (cur + i) as u64 + 1;
            cur += i + 1;
            if next >= self.own.end {
                self.line_start = None;
                return Flow::Done;
            }
            self.line_start = Some(next);
        }
        // The whole lines from `cur` that start in the range, searched as one block.
        let end = offset + bytes.len() as u64;
        let last_nl = |from: usize| memchr::memrchr(b'\n', &bytes[from..]).map(|i| from + i + 1);
        let (block_end, done) = if self.own.end <= end {
            let t = ((self.own.end - 1 - offset) as usize).max(cur);
            match memchr::memchr(b'\n', &bytes[t..]) {
                Some(i) => (t + i + 1, true),
                None => (last_nl(cur).unwrap_or(cur), false),
            }
        } else {
            (last_nl(cur).unwrap_or(cur), false)
        };
        if block_end > cur {
            self.block(offset + cur as u64, &bytes[cur..block_end]);
        }
        if done {
            self.line_start = None;
            return Flow::Done;
        }
        self.line_start = Some(offset + block_end as u64);
        self.line.extend_from_slice(&bytes[block_end..]);
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
