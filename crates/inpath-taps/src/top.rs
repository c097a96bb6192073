//! The sketch tap's top items (`top=K`): the heavy hitters a live page shows beside the
//! distinct count and F2.
//!
//! Count-Min answers "how often did this item occur" but cannot list items, so the tap keeps
//! candidates: one record in [`SAMPLE`] on average goes through a Space-Saving summary of
//! [`capacity`] counters (8 per item, at least 64; Metwally, Agrawal and El Abbadi, 2005), and
//! the reported counts are the Count-Min estimates of the candidates, which are never below the
//! true counts. Space-Saving keeps every item whose sampled count exceeds the sample's size
//! over the number of counters, so items above about `1 / capacity` of the stream are found
//! whatever the order. The sampled records are picked by their index with pseudo-random gaps
//! (a periodic stream cannot hide an item between samples), and a record cut by a chunk end is
//! completed from the next chunk, so any chunking gives the same candidates; lines longer than
//! [`MAX_KEY`] are not kept. Merging two results unites their candidates and re-estimates them
//! on the merged sketch.

use inpath_sketch::{ItemKind, Sketch};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// One record in this many is sampled, on average.
pub const SAMPLE: u64 = 64;
/// The most top items a tap reports.
pub const MAX_TOP: usize = 50;
/// The longest line kept as a candidate.
pub const MAX_KEY: usize = 256;

/// Space-Saving counters for `k` top items: 8 per item, at least 64.
pub fn capacity(k: usize) -> usize {
    (8 * k).max(64)
}

/// Candidates of a stream of records.
#[derive(Clone, Debug)]
pub struct TopTracker {
    k: usize,
    /// Bytes per record (4 or 8), or `None` for lines.
    width: Option<usize>,
    /// Bytes seen so far in this job.
    bytes: u64,
    /// Lines ended so far in this job (lines only).
    lines: u64,
    /// The index of the next record to sample, and the samples taken.
    next: u64,
    samples: u64,
    /// The start of a sampled record that the chunk cut (a line: its bytes so far, up to one
    /// more than [`MAX_KEY`]).
    pending: Vec<u8>,
    /// Bytes of the current line so far (lines only).
    line_len: usize,
    /// Space-Saving's counters and their keys (slot i), and the slot of each key.
    counts: Vec<u64>,
    keys: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize, BuildHasherDefault<KeyHasher>>,
}

/// A multiply-rotate hasher for the short keys of the summary (records of 4 or 8 bytes, lines
/// of at most [`MAX_KEY`]): the candidates are not chosen by an adversary who could aim at
/// collisions in a few hundred slots, and SipHash cost more than the rest of the sample.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            let v = u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59);
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

impl TopTracker {
    /// Tracks the top `k` records of `width` bytes each (`None`: text lines).
    pub fn new(k: usize, width: Option<usize>) -> TopTracker {
        TopTracker {
            k,
            width,
            bytes: 0,
            lines: 0,
            next: gap(0) - 1,
            samples: 0,
            pending: Vec::new(),
            line_len: 0,
            counts: Vec::with_capacity(capacity(k)),
            keys: Vec::with_capacity(capacity(k)),
            index: HashMap::with_capacity_and_hasher(capacity(k), Default::default()),
        }
    }

    /// How many items are reported.
    pub fn k(&self) -> usize {
        self.k
    }

    fn capacity(&self) -> usize {
        capacity(self.k)
    }

    /// Samples the records of the next chunk of the stream. The sampled records are a function
    /// of their index in the stream (gaps of 1 to 127 records, 64 on average, from a fixed
    /// pseudo-random sequence, so a periodic stream cannot hide an item between samples), and
    /// one cut by a chunk end is completed from the next chunk: any chunking samples the same
    /// records in the same order.
    pub fn feed(&mut self, chunk: &[u8]) {
        match self.width {
            Some(w) => self.feed_fixed(chunk, w),
            None => self.feed_lines(chunk),
        }
        self.bytes += chunk.len() as u64;
    }

    fn advance(&mut self) {
        self.samples += 1;
        self.next += gap(self.samples);
    }

    fn feed_fixed(&mut self, chunk: &[u8], w: usize) {
        if !self.pending.is_empty() {
            let need = (w - self.pending.len()).min(chunk.len());
            self.pending.extend_from_slice(&chunk[..need]);
            if self.pending.len() < w {
                return;
            }
            let key = std::mem::take(&mut self.pending);
            self.offer(&key);
            self.advance();
        }
        let end = self.bytes + chunk.len() as u64;
        loop {
            // The next sampled record starts in this chunk or later (one that began earlier
            // was completed above).
            let start = self.next * w as u64;
            if start >= end {
                break;
            }
            let at = (start - self.bytes) as usize;
            if at + w <= chunk.len() {
                self.offer(&chunk[at..at + w]);
                self.advance();
            } else {
                self.pending = chunk[at..].to_vec();
                break;
            }
        }
    }

    fn feed_lines(&mut self, chunk: &[u8]) {
        let mut start = 0usize;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if self.lines == self.next {
                let mut key = std::mem::take(&mut self.pending);
                if self.line_len + (end - start) <= MAX_KEY + 1 {
                    key.extend_from_slice(&chunk[start..end]);
                    if key.last() == Some(&b'\r') {
                        key.pop();
                    }
                    if key.len() <= MAX_KEY {
                        self.offer(&key);
                    }
                }
                self.advance();
            }
            self.lines += 1;
            self.line_len = 0;
            start = end + 1;
        }
        let tail = &chunk[start..];
        if self.lines == self.next && self.line_len + tail.len() <= MAX_KEY + 1 {
            self.pending.extend_from_slice(tail);
        } else {
            self.pending.clear();
        }
        self.line_len += tail.len();
    }

    /// Space-Saving: a new key takes the place of the smallest counter, plus one. The counters
    /// are a flat array (the smallest is found by a scan of at most a few hundred words) with a
    /// hash index over the keys; a lookup allocates nothing.
    fn offer(&mut self, key: &[u8]) {
        if let Some(&slot) = self.index.get(key) {
            self.counts[slot] += 1;
            return;
        }
        if self.counts.len() < self.capacity() {
            self.index.insert(key.to_vec(), self.counts.len());
            self.keys.push(key.to_vec());
            self.counts.push(1);
            return;
        }
        let (slot, least) = self
            .counts
            .iter()
            .enumerate()
            .min_by_key(|&(_, c)| *c)
            .map(|(i, c)| (i, *c))
            .expect("the summary is full, so it has a smallest counter");
        // The evicted key's buffers are reused: an eviction allocates nothing.
        let mut indexed = match self.index.remove_entry(self.keys[slot].as_slice()) {
            Some((old, _)) => old,
            None => Vec::new(),
        };
        indexed.clear();
        indexed.extend_from_slice(key);
        self.index.insert(indexed, slot);
        self.keys[slot].clear();
        self.keys[slot].extend_from_slice(key);
        self.counts[slot] = least + 1;
    }

    /// The candidates now, for a result that outlives this job.
    pub fn candidates(&self) -> TopCandidates {
        let mut keys = self.keys.clone();
        keys.sort();
        TopCandidates { k: self.k, keys }
    }

    /// Forgets the job (the next job starts empty). A final line without a newline is not
    /// sampled.
    pub fn reset(&mut self) {
        self.bytes = 0;
        self.lines = 0;
        self.next = gap(0) - 1;
        self.samples = 0;
        self.line_len = 0;
        self.pending.clear();
        self.counts.clear();
        self.keys.clear();
        self.index.clear();
    }
}

/// Candidate keys with the number of top items to report; merged by union.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopCandidates {
    /// Items reported.
    pub k: usize,
    /// Candidate keys, sorted, in the items' own encoding.
    pub keys: Vec<Vec<u8>>,
}

impl TopCandidates {
    fn capacity(&self) -> usize {
        capacity(self.k)
    }

    /// Unites `other`'s candidates into these, keeping the [`capacity`] with the largest estimates
    /// on `sketch` (the merged sketch) so that a long-running merge stays bounded.
    pub fn merge(&mut self, other: &TopCandidates, sketch: &Sketch) {
        self.k = self.k.max(other.k);
        self.keys.extend(other.keys.iter().cloned());
        self.keys.sort();
        self.keys.dedup();
        if self.keys.len() > self.capacity() {
            let mut ranked = ranked(&self.keys, sketch);
            ranked.truncate(self.capacity());
            self.keys = ranked.into_iter().map(|(key, _)| key).collect();
            self.keys.sort();
        }
    }

    /// The top `k` as JSON, `[{"item": ..., "estimate": N}]`, largest first (ties by item).
    pub fn to_json(&self, sketch: &Sketch) -> Value {
        let mut ranked = ranked(&self.keys, sketch);
        ranked.truncate(self.k);
        Value::Array(
            ranked
                .into_iter()
                .map(|(key, estimate)| json!({"item": display(&key, sketch.kind()), "estimate": estimate}))
                .collect(),
        )
    }
}

/// The gap before sample `k + 1`: 1 to `2 * SAMPLE - 1` records (splitmix64 of `k`).
fn gap(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    1 + (z ^ (z >> 31)) % (2 * SAMPLE - 1)
}

/// Keys with their Count-Min estimates, largest first, ties by key.
fn ranked(keys: &[Vec<u8>], sketch: &Sketch) -> Vec<(Vec<u8>, u64)> {
    let mut out: Vec<(Vec<u8>, u64)> = keys
        .iter()
        .filter_map(|k| Some((k.clone(), sketch.frequency_of_bytes(k).ok()?)))
        .filter(|(_, n)| *n > 0)
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// An item as a person reads it: a number for integer items, text (lossy UTF-8) for lines.
fn display(key: &[u8], kind: ItemKind) -> Value {
    match (kind, key.len()) {
        (ItemKind::U32, 4) => json!(u32::from_le_bytes(key.try_into().expect("4 bytes"))),
        (ItemKind::U64, 8) => json!(u64::from_le_bytes(key.try_into().expect("8 bytes"))),
        _ => json!(String::from_utf8_lossy(key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use inpath_core::Engine;
    use inpath_sketch::{Params, SketchEngine};

    /// A skewed stream: item i (1..=50) occurs 30000 / i times (item 5: 3.6 % of the records,
    /// above the 1/64 that 64 counters guarantee), and 100k distinct items once.
    fn stream() -> Vec<u32> {
        let mut items = Vec::new();
        for i in 1..=50u32 {
            items.extend(std::iter::repeat_n(i, (30_000 / i) as usize));
        }
        items.extend(1000..101_000u32);
        // A fixed shuffle (xorshift), so heavy items are spread over the stream.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in (1..items.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            items.swap(i, (x % (i as u64 + 1)) as usize);
        }
        items
    }

    fn items_of(top: &Value) -> Vec<u64> {
        top.as_array()
            .unwrap()
            .iter()
            .map(|t| t["item"].as_u64().unwrap())
            .collect()
    }

    fn le_bytes(items: &[u32]) -> Vec<u8> {
        items.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn top_of(chunks: &[&[u8]], k: usize) -> Value {
        let mut engine = SketchEngine::u32(Params::default()).unwrap();
        let mut top = TopTracker::new(k, Some(4));
        for c in chunks {
            engine.update(c).unwrap();
            top.feed(c);
        }
        let sketch = engine.finish().unwrap();
        top.candidates().to_json(&sketch)
    }

    #[test]
    fn the_heavy_items_are_found_with_counts_never_below_the_truth() {
        let bytes = le_bytes(&stream());
        let got = top_of(&[&bytes], 5);
        assert_eq!(items_of(&got), [1, 2, 3, 4, 5], "{got}");
        for t in got.as_array().unwrap() {
            let item = t["item"].as_u64().unwrap();
            assert!(t["estimate"].as_u64().unwrap() >= 30_000 / item, "{t}");
        }
    }

    #[test]
    fn any_chunking_finds_the_same_heavy_items() {
        let bytes = le_bytes(&stream());
        let whole = top_of(&[&bytes], 3);
        for cut in [1usize, 3, 4, 4097, 65_537] {
            let chunks: Vec<&[u8]> = bytes.chunks(cut).collect();
            assert_eq!(top_of(&chunks, 3), whole, "chunks of {cut} bytes");
        }
    }

    #[test]
    fn lines_are_sampled_whole_and_merge_unites_candidates() {
        let mut text = Vec::new();
        for i in 0..20_000 {
            let line = if i % 3 == 0 {
                "GET /index.html".to_string()
            } else {
                format!("GET /page/{i}")
            };
            text.extend_from_slice(line.as_bytes());
            text.extend_from_slice(b"\r\n");
        }
        let mut engine = SketchEngine::lines(Params::default()).unwrap();
        let mut top = TopTracker::new(2, None);
        for c in text.chunks(1000) {
            engine.update(c).unwrap();
            top.feed(c);
        }
        let sketch = engine.finish().unwrap();
        let mut merged = TopCandidates::default();
        merged.merge(&top.candidates(), &sketch);
        let got = merged.to_json(&sketch);
        assert_eq!(got[0]["item"], "GET /index.html", "{got}");
        assert!(got[0]["estimate"].as_u64().unwrap() >= 6667);
        assert!(merged.keys.len() <= capacity(2));
    }

    #[test]
    fn a_periodic_stream_cannot_hide_an_item_between_samples() {
        // Item 11 at every index 1 mod 16, item 7 at every index 0 mod 8, noise elsewhere: a
        // fixed stride of 16 would see 7 twice as often as it occurs and never see 11.
        let items: Vec<u32> = (0..400_000u32)
            .map(|i| match (i % 16, i % 8) {
                (1, _) => 11,
                (_, 0) => 7,
                _ => 1000 + i,
            })
            .collect();
        let bytes = le_bytes(&items);
        let got = top_of(&[&bytes], 2);
        assert_eq!(items_of(&got), [7, 11], "{got}");
    }
}
