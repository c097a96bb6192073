//! Hamming nearest neighbours over fixed-size binary items: a flat scan.
//!
//! A handle is a sequence of items of `item_size` bytes (item `i` at byte `i·item_size`). For
//! each query (also `item_size` bytes) the kernel keeps the `k` items with the smallest Hamming
//! distance (bits that differ), ties going to the lowest item index, so the answer is the first
//! `k` of all items sorted by `(distance, index)`.
//!
//! Queries are blocked: each item is read once per block of [`QUERY_BLOCK`] queries, and its
//! words are compared with every query of the block while they are in registers, so many
//! queries cost little more memory traffic than one. The distances come from the kernel
//! [`crate::arch`] picks for the CPU (AVX-512 VPOPCNTDQ, AVX2 `vpshufb`, POPCNT or portable
//! `count_ones`); [`distance`] is the scalar reference they are tested against. Approximate
//! search by bit sampling is in [`crate::lsh`].

pub use crate::arch::QUERY_BLOCK;
use crate::arch::{self, HammingKernel};
use crate::kernel::{Flow, Kernel, Partial, Scan};
use crate::StoreError;
use serde::{Deserialize, Serialize};
use std::collections::BinaryHeap;
use std::ops::Range;

/// The largest item size: distances are `u32` bit counts (256 MiB is 2^31 bits).
pub const MAX_ITEM_SIZE: usize = 256 << 20;

/// Items whose distances one kernel call computes (bounds the distance buffer).
const ITEM_BATCH: usize = 1024;
/// Bytes of items one kernel call takes at most (unless one item is larger): a run that
/// stays in L2 while each block of queries goes over it.
const BATCH_BYTES: usize = 256 << 10;

/// A nearest-neighbour search for a set of queries.
#[derive(Clone, Debug)]
pub struct Hamming {
    item_size: usize,
    queries: Vec<u8>,
    k: usize,
    kernel: HammingKernel,
}

impl Hamming {
    /// `queries` holds the queries back to back, `item_size` bytes each; `k` ≥ 1.
    pub fn new(item_size: usize, queries: Vec<u8>, k: usize) -> crate::Result<Hamming> {
        if item_size == 0 || item_size > MAX_ITEM_SIZE {
            return Err(StoreError::parameter(
                "item size",
                item_size,
                "1 byte to 256 MiB",
            ));
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
            kernel: HammingKernel::best(),
        })
    }

    /// The same search with another distance kernel, which must run on this CPU under the
    /// `INPATH_ISA` cap (tests and benchmarks compare them).
    pub fn with_kernel(mut self, kernel: HammingKernel) -> crate::Result<Hamming> {
        if !kernel.runs_here() {
            let here: Vec<_> = HammingKernel::available()
                .iter()
                .map(|k| k.name())
                .collect();
            return Err(StoreError::parameter(
                "Hamming kernel",
                kernel.name(),
                &format!("one this CPU runs under INPATH_ISA: {}", here.join(", ")),
            ));
        }
        self.kernel = kernel;
        Ok(self)
    }

    /// The distance kernel the search runs.
    pub fn kernel(&self) -> HammingKernel {
        self.kernel
    }

    /// The item size in bytes.
    pub fn item_size(&self) -> usize {
        self.item_size
    }

    /// Neighbours per query.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The queries, back to back.
    pub fn query_bytes(&self) -> &[u8] {
        &self.queries
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
    /// Distances of a batch of items to a block of queries, item-major.
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
        HammingScan {
            next_item: own.start.div_ceil(is),
            carry: Vec::new(),
            heaps: vec![BinaryHeap::with_capacity(self.k + 1); self.queries()],
            dist: Vec::new(),
            kernel: self.clone(),
        }
    }
}

impl HammingScan {
    /// Compares whole items (`items.len()` a multiple of the item size) with every query.
    fn items(&mut self, items: &[u8]) {
        let is = self.kernel.item_size;
        let nq = self.kernel.queries();
        let k = self.kernel.k;
        let mut first = self.next_item;
        let batch_items = (BATCH_BYTES / is).clamp(1, ITEM_BATCH);
        for batch in items.chunks(batch_items * is) {
            let n = batch.len() / is;
            for qb in (0..nq).step_by(QUERY_BLOCK) {
                let qn = QUERY_BLOCK.min(nq - qb);
                self.dist.resize(n * qn, 0);
                let queries = &self.kernel.queries[qb * is..(qb + qn) * is];
                arch::distances(self.kernel.kernel, batch, is, queries, qn, &mut self.dist);
                for (i, ds) in self.dist.chunks_exact(qn).enumerate() {
                    let index = first + i as u64;
                    for (heap, &d) in self.heaps[qb..qb + qn].iter_mut().zip(ds) {
                        offer(heap, k, Neighbour { distance: d, index });
                    }
                }
            }
            first += n as u64;
        }
        self.next_item = first;
    }
}

/// Keeps `cand` in a max-heap of the `k` smallest neighbours seen.
#[inline]
pub(crate) fn offer(heap: &mut BinaryHeap<Neighbour>, k: usize, cand: Neighbour) {
    if heap.len() < k {
        heap.push(cand);
    } else if let Some(mut top) = heap.peek_mut() {
        if cand < *top {
            *top = cand;
        }
    }
}

impl Scan for HammingScan {
    type Partial = Neighbours;

    fn feed(&mut self, _offset: u64, bytes: &[u8]) -> Flow {
        let mut carry = std::mem::take(&mut self.carry);
        crate::kernel::whole_items(&mut carry, self.kernel.item_size, bytes, |items| {
            self.items(items)
        });
        self.carry = carry;
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
