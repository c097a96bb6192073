//! The kernel contract: a kernel consumes a handle's page stream and returns a mergeable,
//! serialisable partial.
//!
//! The calling rules:
//!
//! - A job over a handle of `size` bytes is cut into lanes: contiguous, page-aligned byte
//!   ranges that together cover `0..size` ([`lane_ranges`]). Each lane **owns** its range: it
//!   reports exactly the results that start inside it (a match, a line, an item).
//! - A lane may need bytes outside its range to decide (a match that crosses the boundary, the
//!   byte before a line): [`Kernel::reach`] names the bytes it reads, and the runner feeds
//!   exactly those, in order, in chunks of any size (pages), each with its file offset.
//! - [`Scan::feed`] returns [`Flow::Done`] when the lane needs no more bytes; the runner stops
//!   reading and calls [`Scan::finish`], which returns the lane's partial.
//! - Partials merge in lane order ([`Partial::merge`], associative), so every lane count gives
//!   the same result, and serialise with serde so they can travel between processes.

use crate::error::Result;
use crate::reader::FlashReader;
use crate::store::{OpenHandle, RunBuffers};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::ops::Range;
use std::sync::Arc;

/// What a scan wants after a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Feed the next chunk.
    More,
    /// The lane has what it needs.
    Done,
}

/// A lane's result: merges with the result of the lane after it.
pub trait Partial: Serialize + DeserializeOwned + Send + Sized {
    /// Folds `later` (the lane just after `self`, or a merge of lanes after it) into `self`.
    /// Associative: `(a·b)·c == a·(b·c)`.
    fn merge(self, later: Self) -> Self;
}

/// One lane's state while it consumes its bytes.
pub trait Scan: Send {
    /// The partial it returns.
    type Partial: Partial;
    /// Consumes the next chunk, which starts at file offset `offset` and follows the previous
    /// chunk without a gap.
    fn feed(&mut self, offset: u64, bytes: &[u8]) -> Flow;
    /// Ends the lane and returns its partial.
    fn finish(self) -> Self::Partial;
}

/// A kernel: a factory of lane scans.
pub trait Kernel: Sync {
    /// The partial its lanes return.
    type Partial: Partial;
    /// The per-lane state.
    type Scan: Scan<Partial = Self::Partial>;
    /// The bytes a lane owning `own` reads, inside `0..size`.
    fn reach(&self, own: Range<u64>, size: u64) -> Range<u64>;
    /// A scan for the lane owning `own` of a handle of `size` bytes.
    fn scan(&self, own: Range<u64>, size: u64) -> Self::Scan;
}

/// Cuts a lane's chunks into whole items of `item_size` bytes for scans over fixed-size items:
/// `items` gets runs of whole items (possibly none); a partial item waits in `carry` for the
/// next chunk. (A lane's range starts on an item boundary, so nothing is lost at its start.)
pub(crate) fn whole_items(
    carry: &mut Vec<u8>,
    item_size: usize,
    mut bytes: &[u8],
    mut items: impl FnMut(&[u8]),
) {
    if !carry.is_empty() {
        let take = (item_size - carry.len()).min(bytes.len());
        carry.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if carry.len() == item_size {
            items(carry);
            carry.clear();
        }
    }
    let whole = bytes.len() / item_size * item_size;
    items(&bytes[..whole]);
    carry.extend_from_slice(&bytes[whole..]);
}

/// Cuts `0..size` into at most `lanes` contiguous ranges on `page_size` boundaries, as even as
/// whole pages allow. Always at least one range (`0..0` for an empty handle).
pub fn lane_ranges(size: u64, page_size: u64, lanes: usize) -> Vec<Range<u64>> {
    let pages = size.div_ceil(page_size.max(1));
    let lanes = (lanes.max(1) as u64).min(pages.max(1));
    (0..lanes)
        .map(|i| {
            let lo = (pages * i / lanes * page_size).min(size);
            let hi = (pages * (i + 1) / lanes * page_size).min(size);
            lo..hi
        })
        .collect()
}

fn merge_all<P: Partial>(parts: Vec<P>) -> P {
    let mut it = parts.into_iter();
    let first = it.next().expect("at least one lane");
    it.fold(first, P::merge)
}

/// What a run read (its counters, besides the reader's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Bytes the lanes consumed (a lane's reach can go a little past its own range).
    pub bytes_scanned: u64,
    /// Pages the lanes read (mapped, or through the reader).
    pub pages: u64,
    /// Lanes that ran.
    pub lanes: usize,
    /// Whether the lanes read a memory map of the data file (else the reader's workers).
    pub mapped: bool,
}

/// The most bytes the mapped path hands a scan at once (a run of pages stored back to back).
const MAPPED_RUN: u64 = 1 << 20;

/// Runs `kernel` over a handle with `lanes` lanes.
///
/// Where the reader allows it ([`ReaderConfig::mapped`](crate::ReaderConfig::mapped), not
/// `direct`) and the data file can be mapped, each lane reads the mapped file in its own
/// thread: runs of raw pages in place, sealed pages unsealed one at a time. Otherwise each lane
/// opens a port on the reader and its workers fetch the pages. The results are the same.
pub fn run<K: Kernel>(
    reader: &FlashReader,
    handle: &Arc<OpenHandle>,
    kernel: &K,
    lanes: usize,
) -> Result<K::Partial> {
    run_counted(reader, handle, kernel, lanes).map(|(p, _)| p)
}

/// [`run`], also returning what it read.
pub fn run_counted<K: Kernel>(
    reader: &FlashReader,
    handle: &Arc<OpenHandle>,
    kernel: &K,
    lanes: usize,
) -> Result<(K::Partial, RunStats)> {
    let entry = handle.entry();
    let size = entry.size;
    let ranges = lane_ranges(size, entry.page_size as u64, lanes);
    let config = reader.config();
    let mapped = config.mapped && !config.direct && size > 0 && handle.mapping().is_some();
    let results: Vec<Result<(K::Partial, u64, u64)>> = std::thread::scope(|s| {
        let tasks: Vec<_> = ranges
            .iter()
            .map(|own| {
                let own = own.clone();
                s.spawn(move || -> Result<(K::Partial, u64, u64)> {
                    let reach = kernel.reach(own.clone(), size);
                    let mut scan = kernel.scan(own, size);
                    let (mut fed, mut pages) = (0u64, 0u64);
                    if mapped {
                        let mut bufs = RunBuffers::default();
                        pages = handle
                            .feed_mapped(reach, MAPPED_RUN, &mut bufs, |at, bytes| {
                                fed += bytes.len() as u64;
                                scan.feed(at, bytes) == Flow::More
                            })?
                            .unwrap_or(0);
                    } else {
                        let mut port =
                            reader.request(handle, reach.start, reach.end - reach.start)?;
                        while let Some(chunk) = port.next_chunk() {
                            let chunk = chunk?;
                            fed += chunk.bytes().len() as u64;
                            pages += chunk.pages;
                            if scan.feed(chunk.offset(), chunk.bytes()) == Flow::Done {
                                break;
                            }
                        }
                    }
                    Ok((scan.finish(), fed, pages))
                })
            })
            .collect();
        tasks
            .into_iter()
            .map(|t| t.join().expect("a lane panicked"))
            .collect()
    });
    let results = results.into_iter().collect::<Result<Vec<_>>>()?;
    let stats = RunStats {
        bytes_scanned: results.iter().map(|r| r.1).sum(),
        pages: results.iter().map(|r| r.2).sum(),
        lanes: results.len(),
        mapped,
    };
    Ok((merge_all(results.into_iter().map(|r| r.0).collect()), stats))
}

/// Runs `kernel` over bytes in memory, lanes cut on `page_size` boundaries and each lane fed
/// in chunks of `chunk` bytes (the reference path of the tests, and for data not in a store).
pub fn run_slice<K: Kernel>(
    bytes: &[u8],
    kernel: &K,
    lanes: usize,
    page_size: u64,
    chunk: usize,
) -> K::Partial {
    let size = bytes.len() as u64;
    let parts = lane_ranges(size, page_size, lanes)
        .into_iter()
        .map(|own| {
            let reach = kernel.reach(own.clone(), size);
            let mut scan = kernel.scan(own, size);
            let mut at = reach.start;
            while at < reach.end {
                let hi = (at + chunk.max(1) as u64).min(reach.end);
                if scan.feed(at, &bytes[at as usize..hi as usize]) == Flow::Done {
                    break;
                }
                at = hi;
            }
            scan.finish()
        })
        .collect();
    merge_all(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_cover_the_file_on_page_boundaries() {
        for size in [0u64, 1, 8191, 8192, 8193, 100_000] {
            for lanes in 1..9 {
                let r = lane_ranges(size, 8192, lanes);
                assert!(!r.is_empty());
                assert_eq!(r[0].start, 0);
                assert_eq!(r.last().unwrap().end, size);
                for w in r.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert_eq!(w[0].end % 8192, 0);
                }
            }
        }
    }
}
