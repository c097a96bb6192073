//! Hamming nearest neighbours over fixed-size binary items: a flat scan.
//!
//! A handle is a sequence of items of `item_size` bytes (item `i` at byte `i·item_size`). For
//! each query (also `item_size` bytes) the kernel keeps the `k` items with the smallest Hamming
//! distance (bits that differ), ties going to the lowest item index, so the answer is the first
//! `k` of all items sorted by `(distance, index)`. Distances are 64-bit words XORed and counted
//! with `u64::count_ones` (POPCNT where the target has it), the tail bytes one by one.
//!
//! Queries are blocked: each item is read once per block of [`QUERY_BLOCK`] queries, and its
//! words are compared with every query of the block while they are in registers, so many
//! queries cost little more memory traffic than one.

use crate::kernel::{Flow, Kernel, Partial, Scan};
use crate::StoreError;
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;
use std::ops::Range;

/// Queries compared with an item in one pass over it.
pub const QUERY_BLOCK: usize = 8;

/// A nearest-neighbour search for a set of queries.
#[derive(Clone, Debug)]
pub struct Hamming {
    item_size: usize,
    queries: Vec<u8>,
    k: usize,
}

impl Hamming {
    /// `queries` holds the queries back to back, `item_size` bytes each; `k` ≥ 1.
    pub fn new(item_size: usize, queries: Vec<u8>, k: usize) -> crate::Result<Hamming> {
        if item_size == 0 {
            return Err(StoreError::parameter("item size", 0, "at least 1 byte"));
        }
        if queries.is_empty() || !queries.len().is_multiple_of(item_size) {
            return Err(StoreError::parameter(
                "queries",
                format!("{} bytes", queries.len()),
                &format!("a non-zero multiple of the item size ({item_size} bytes)"),
            ));
        }
        if k == 0 {
            return Err(StoreError::parameter("k", 0, "at least 1"));
        }
        Ok(Hamming {
            item_size,
            queries,
            k,
        })
    }

    /// Checks that a handle of `size` bytes holds whole items.
    pub fn check_size(&self, size: u64) -> crate::Result<()> {
        if !size.is_multiple_of(self.item_size as u64) {
            return Err(StoreError::parameter(
                "item size",
                self.item_size,
                &format!("a divisor of the handle's size ({size} bytes)"),
            ));
        }
        Ok(())
    }

    /// The number of queries.
    pub fn queries(&self) -> usize {
        self.queries.len() / self.item_size
    }
}

/// The Hamming distance of two equal-length byte strings (the scalar reference).
pub fn distance(a: &[u8], b: &[u8]) -> u32 {
    let mut d = 0;
    let (aw, at) = a.split_at(a.len() / 8 * 8);
    let (bw, bt) = b.split_at(aw.len());
    for (x, y) in aw.chunks_exact(8).zip(bw.chunks_exact(8)) {
        let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(y.try_into().expect("8 bytes"));
        d += (x ^ y).count_ones();
    }
    for (x, y) in at.iter().zip(bt) {
        d += (x ^ y).count_ones();
    }
    d
}

/// One neighbour: an item index and its distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Neighbour {
    /// Hamming distance in bits (compared first).
    pub distance: u32,
    /// Item index (ties go to the lower).
    pub index: u64,
}

/// The nearest neighbours of each query, nearest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Neighbours {
    /// k.
    pub k: usize,
    /// Per query, up to `k` neighbours sorted by `(distance, index)`.
    pub queries: Vec<Vec<Neighbour>>,
}

impl Partial for Neighbours {
    fn merge(mut self, later: Neighbours) -> Neighbours {
        if self.queries.is_empty() {
            return later;
        }
        for (mine, theirs) in self.queries.iter_mut().zip(later.queries) {
            mine.extend(theirs);
            mine.sort_unstable();
            mine.truncate(self.k);
        }
        self
    }
}

/// The lane state of a [`Hamming`] search.
#[derive(Debug)]
pub struct HammingScan {
    kernel: Hamming,
    /// Item index of the next whole item.
    next_item: u64,
    carry: Vec<u8>,
    heaps: Vec<BinaryHeap<Neighbour>>,
    /// Query words, query-major, `words` per query; then the tails.
    words: usize,
    qwords: Vec<u64>,
    dist: Vec<u32>,
}

impl Kernel for Hamming {
    type Partial = Neighbours;
    type Scan = HammingScan;

    fn reach(&self, own: Range<u64>, size: u64) -> Range<u64> {
        let is = self.item_size as u64;
        let first = own.start.div_ceil(is) * is;
        let last = (own.end.div_ceil(is) * is).min(size / is * is);
        first.min(last)..last
    }

    fn scan(&self, own: Range<u64>, _size: u64) -> HammingScan {
        let is = self.item_size as u64;
        let words = self.item_size / 8;
        let qwords = self
            .queries
            .chunks_exact(self.item_size)
            .flat_map(|q| {
                q[..words * 8]
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            })
            .collect();
        HammingScan {
            next_item: own.start.div_ceil(is),
            carry: Vec::new(),
            heaps: vec![BinaryHeap::with_capacity(self.k + 1); self.queries()],
            words,
            qwords,
            dist: vec![0; QUERY_BLOCK],
            kernel: self.clone(),
        }
    }
}

impl HammingScan {
    /// Compares whole items (`items.len()` a multiple of the item size) with every query.
    fn items(&mut self, items: &[u8]) {
        let is = self.kernel.item_size;
        let nq = self.kernel.queries();
        let words = self.words;
        let first = self.next_item;
        for qb in (0..nq).step_by(QUERY_BLOCK) {
            let qn = QUERY_BLOCK.min(nq - qb);
            for (n, item) in items.chunks_exact(is).enumerate() {
                let dist = &mut self.dist[..qn];
                dist.fill(0);
                for (w, word) in item[..words * 8].chunks_exact(8).enumerate() {
                    let x = u64::from_le_bytes(word.try_into().expect("8 bytes"));
                    for (j, d) in dist.iter_mut().enumerate() {
                        *d += (x ^ self.qwords[(qb + j) * words + w]).count_ones();
                    }
                }
                if words * 8 < is {
                    for (j, d) in dist.iter_mut().enumerate() {
                        let q = &self.kernel.queries[(qb + j) * is..(qb + j + 1) * is];
                        *d += distance(&item[words * 8..], &q[words * 8..]);
                    }
                }
                let index = first + n as u64;
                for (j, &d) in self.dist[..qn].iter().enumerate() {
                    let heap = &mut self.heaps[qb + j];
                    let cand = Neighbour { distance: d, index };
                    if heap.len() < self.kernel.k {
                        heap.push(cand);
                    } else if heap.peek().is_some_and(|top| cand < *top) {
                        heap.pop();
                        heap.push(cand);
                    }
                }
            }
        }
        self.next_item += (items.len() / is) as u64;
    }
}

impl Scan for HammingScan {
    type Partial = Neighbours;

    fn feed(&mut self, _offset: u64, mut bytes: &[u8]) -> Flow {
        let is = self.kernel.item_size;
        if !self.carry.is_empty() {
            let take = (is - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() == is {
                let item = std::mem::take(&mut self.carry);
                self.items(&item);
            }
        }
        let whole = bytes.len() / is * is;
        self.items(&bytes[..whole]);
        self.carry.extend_from_slice(&bytes[whole..]);
        Flow::More
    }

    fn finish(self) -> Neighbours {
        Neighbours {
            k: self.kernel.k,
            queries: self
                .heaps
                .into_iter()
                .map(|h| h.into_sorted_vec())
                .collect(),
        }
    }
}
