//! The page chase: a file whose every page names the next, and the kernel that follows it.
//!
//! The chase is the store's latency workload: each hop needs the page before it, so nothing can
//! be read ahead and a hop costs one page read. Every page begins with a 40-byte header (all
//! integers little-endian; also in docs/FORMATS.md, "chase file"):
//!
//! ```text
//! offset  size  field
//!  0      8     magic "INPCHASE"
//!  8      2     format version, u16: 1
//! 10      2     reserved, zero
//! 12      4     page size P, u32: the store page size the file is laid out for (page k is
//!               bytes k·P .. (k+1)·P; must equal the handle's page size)
//! 16      8     this page's index k, u64 (a page that moved is caught)
//! 24      8     next page index, u64; u64::MAX ends the chain
//! 32      4     reserved, zero
//! 36      4     CRC-32 (IEEE, as zlib's crc32) of bytes 0..36
//! 40      …     payload, up to the end of the page (not interpreted, not covered by the CRC)
//! ```
//!
//! The CRC covers the header only, which is all the kernel uses: checking the whole page would
//! cost more than the read itself (the target is a hop within 10% of a raw `pread`); sealed
//! pages (GCM) authenticate the whole page anyway. The magic, the version and the CRC keep their
//! places in every version.
//!
//! [`chase`] reads exactly one page per hop with `OpenHandle::read_page` into one reused buffer,
//! checks the header, and stops at the end of the chain, after `max_hops` pages, or when the
//! next page was visited already (a cycle; a bitmap of visited pages makes that one bit test),
//! so it always ends. [`ChasePages`] writes a chase file: a seeded random order of all pages
//! starting at page 0, ending or (with `cycle`) returning to page 0.

use crate::catalog::Entry;
use crate::error::{Result, StoreError};
use crate::graph::SplitMix;
use crate::store::OpenHandle;
use std::io::Read;
use std::os::unix::fs::FileExt;

/// The chase page header's magic number.
pub const CHASE_MAGIC: [u8; 8] = *b"INPCHASE";
/// The newest chase format version this build writes and reads.
pub const CHASE_VERSION: u16 = 1;
/// Bytes of the header at the start of every page.
pub const CHASE_HEADER: usize = 40;
/// The next-page index that ends the chain.
pub const END: u64 = u64::MAX;

const FORMAT: &str = "chase file";

/// Why a chase stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The last page read ends the chain.
    End,
    /// `max_hops` pages were read and the chain goes on.
    MaxHops,
    /// The next page was visited before: the chain is a cycle (`page` is where it closes).
    Cycle {
        /// The page visited twice.
        page: u64,
    },
}

/// The result of a chase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chased {
    /// The pages read, in order (the start page first): one per hop.
    pub sequence: Vec<u64>,
    /// Why it stopped.
    pub stop: Stop,
}

/// The order in which a chase file written with `seed` links its `pages` pages: page 0, then
/// every other page once in a seeded random order.
pub fn chase_order(pages: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..pages).collect();
    let mut rng = SplitMix(seed ^ 0x6368_6173_6521);
    for i in (2..order.len()).rev() {
        let j = 1 + rng.below(i as u64) as usize;
        order.swap(i, j);
    }
    order
}

/// A chase file as a reader, generated page by page (so a large file needs no memory): pages
/// linked in [`chase_order`], the last one ending the chain or, with `cycle`, naming page 0. The
/// payload is pseudo-random bytes.
#[derive(Debug)]
pub struct ChasePages {
    next: Vec<u64>,
    page_size: u32,
    seed: u64,
    page: u64,
    buf: Vec<u8>,
    at: usize,
}

impl ChasePages {
    /// `pages` pages (at least 1) of `page_size` bytes (512 .. 16 MiB, a multiple of 8).
    pub fn new(pages: u64, page_size: u32, seed: u64, cycle: bool) -> Result<ChasePages> {
        if pages == 0 || pages > 1 << 32 {
            return Err(StoreError::parameter("pages", pages, "1 to 2^32"));
        }
        crate::graph::check_page_size(page_size)?;
        let order = chase_order(pages, seed);
        let mut next = vec![END; pages as usize];
        for w in order.windows(2) {
            next[w[0] as usize] = w[1];
        }
        if cycle {
            next[*order.last().expect("one page at least") as usize] = order[0];
        }
        Ok(ChasePages {
            next,
            page_size,
            seed,
            page: 0,
            buf: Vec::new(),
            at: 0,
        })
    }

    fn fill(&mut self) {
        let p = self.page_size as usize;
        self.buf.clear();
        self.buf.extend_from_slice(&CHASE_MAGIC);
        self.buf.extend_from_slice(&CHASE_VERSION.to_le_bytes());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&self.page_size.to_le_bytes());
        self.buf.extend_from_slice(&self.page.to_le_bytes());
        self.buf
            .extend_from_slice(&self.next[self.page as usize].to_le_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        let crc = crc32fast::hash(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        let mut rng = SplitMix(self.seed ^ self.page.wrapping_mul(0xA24B_AED4_963E_E407));
        while self.buf.len() < p {
            let word = rng.next().to_le_bytes();
            let take = (p - self.buf.len()).min(8);
            self.buf.extend_from_slice(&word[..take]);
        }
        self.at = 0;
    }
}

impl Read for ChasePages {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.buf.len() {
            if self.page >= self.next.len() as u64 {
                return Ok(0);
            }
            self.fill();
            self.page += 1;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Follows the chain from page `start`, reading at most `max_hops` pages (see the
/// [module docs](self)).
pub fn chase(handle: &OpenHandle, start: u64, max_hops: u64) -> Result<Chased> {
    let entry = handle.entry();
    let id = entry.handle;
    let pages = entry.pages();
    if start >= pages {
        return Err(StoreError::parameter(
            "start page",
            start,
            &format!("a page of the handle (it has {pages})"),
        ));
    }
    let corrupt = |page: u64, detail: String| StoreError::Corrupt {
        handle: id,
        format: FORMAT,
        page,
        detail,
    };
    let mut seen = vec![0u64; pages.div_ceil(64) as usize];
    let mut sequence = Vec::with_capacity(max_hops.min(pages) as usize);
    let mut buf = Vec::with_capacity(entry.page_size as usize);
    let mut page = start;
    let stop = loop {
        let (word, bit) = ((page / 64) as usize, 1u64 << (page % 64));
        if seen[word] & bit != 0 {
            break Stop::Cycle { page };
        }
        if sequence.len() as u64 == max_hops {
            break Stop::MaxHops;
        }
        seen[word] |= bit;
        handle.read_page(page, &mut buf)?;
        if buf.len() < CHASE_HEADER {
            return Err(corrupt(
                page,
                format!(
                    "the page is {} bytes, shorter than the {CHASE_HEADER}-byte header",
                    buf.len()
                ),
            ));
        }
        let h = &buf[..CHASE_HEADER];
        if h[..8] != CHASE_MAGIC {
            let found = format!(
                "starts with {:?}, not the magic \"INPCHASE\"",
                String::from_utf8_lossy(&h[..8])
            );
            if sequence.is_empty() {
                return Err(StoreError::NotFormat {
                    handle: id,
                    format: FORMAT,
                    detail: format!("page {page} {found}"),
                });
            }
            return Err(corrupt(page, format!("the page {found}")));
        }
        let stored = u32::from_le_bytes(h[36..40].try_into().expect("4 bytes"));
        let computed = crc32fast::hash(&h[..36]);
        if stored != computed {
            return Err(corrupt(
                page,
                format!(
                    "the page header fails its CRC-32 (stored {stored:08x}, computed \
                     {computed:08x})"
                ),
            ));
        }
        let version = u16::from_le_bytes([h[8], h[9]]);
        if version > CHASE_VERSION {
            return Err(StoreError::FormatVersion {
                handle: id,
                format: FORMAT,
                version,
                newest: CHASE_VERSION,
            });
        }
        if version == 0 || h[10..12] != [0, 0] || h[32..36] != [0; 4] {
            return Err(corrupt(
                page,
                "format version 0 or reserved bytes not zero".to_string(),
            ));
        }
        let page_size = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
        if page_size != entry.page_size {
            return Err(StoreError::PageSizeMismatch {
                handle: id,
                format: FORMAT,
                written: page_size as u64,
                stored: entry.page_size as u64,
            });
        }
        let me = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        if me != page {
            return Err(corrupt(
                page,
                format!("the page says it is page {me} (a page out of place)"),
            ));
        }
        let next = u64::from_le_bytes(h[24..32].try_into().expect("8 bytes"));
        sequence.push(page);
        if next == END {
            break Stop::End;
        }
        if next >= pages {
            return Err(corrupt(
                page,
                format!(
                    "the page names page {next} as the next, past the last page {}",
                    pages - 1
                ),
            ));
        }
        page = next;
    };
    Ok(Chased { sequence, stop })
}

/// The benchmark baseline of [`chase`]: plain `pread`s of the raw pages of `entry` in `file`
/// (its data file), following the next-page field with no checks, into one reused buffer. Stops
/// at the end of the chain or after `max_hops` pages (no cycle check); a next page outside the
/// handle is an `InvalidData` error.
pub fn chase_pread(
    file: &std::fs::File,
    entry: &Entry,
    start: u64,
    max_hops: u64,
) -> std::io::Result<Chased> {
    let mut sequence = Vec::with_capacity(max_hops.min(entry.pages()) as usize);
    let mut buf = vec![0u8; entry.page_size as usize];
    let mut page = start;
    let stop = loop {
        if sequence.len() as u64 == max_hops {
            break Stop::MaxHops;
        }
        let extent = entry.extents.get(page as usize).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "page {page} is past the last page of handle {}",
                    entry.handle
                ),
            )
        })?;
        let len = entry.page_len(page) as usize;
        file.read_exact_at(&mut buf[..len], extent.offset)?;
        sequence.push(page);
        let next = match buf.get(24..32) {
            Some(b) => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            None => END,
        };
        if next == END {
            break Stop::End;
        }
        page = next;
    };
    Ok(Chased { sequence, stop })
}
