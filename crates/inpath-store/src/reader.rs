//! The Flash Server read interface: requests `(handle, offset, length)` become tagged page
//! reads served by a pool of `pread` workers; reads complete in any order and each request's
//! pages come out of its own [`Port`] in order.
//!
//! - **Tags.** Every page read gets a tag (a number unique within the reader) and completes
//!   exactly once, with its page or its error.
//! - **Queue depth.** At most `depth` page reads wait for a worker (a bounded queue shared by
//!   all ports), and a port keeps at most `depth` of its own reads outstanding: it issues the
//!   next read as the consumer takes a page, so a slow consumer holds back only its own port.
//! - **Ports are FIFO.** A port holds pages that completed early until the ones before them
//!   are in, then hands them out in page order; dropping a port abandons its outstanding reads
//!   (they complete into nothing).
//!
//! ```no_run
//! use inpath_store::{FlashReader, ReaderConfig, Store};
//! let store = Store::open("/srv/store".as_ref())?;
//! let handle = store.open_handle(1.into())?;
//! let reader = FlashReader::new(ReaderConfig::default());
//! let mut port = reader.request(&handle, 0, handle.entry().size)?;
//! while let Some(chunk) = port.next_chunk() {
//!     let chunk = chunk?;
//!     println!("{} bytes at {}", chunk.bytes().len(), chunk.offset());
//! }
//! # Ok::<(), inpath_store::StoreError>(())
//! ```

use crate::error::{Result, StoreError};
use crate::store::OpenHandle;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The reader's shape.
#[derive(Clone, Debug)]
pub struct ReaderConfig {
    /// `pread` worker threads (at least 1).
    pub workers: usize,
    /// Queue depth: page reads waiting for a worker, and outstanding reads per port (at least 1).
    pub depth: usize,
    /// A testing aid: before each read, a worker sleeps a pseudo-random time derived from
    /// `(seed, tag)`, up to `max`, so reads complete in scrambled orders that a seed repeats.
    pub jitter: Option<Jitter>,
}

/// Pseudo-random delays before reads (see [`ReaderConfig::jitter`]).
#[derive(Clone, Copy, Debug)]
pub struct Jitter {
    /// The seed.
    pub seed: u64,
    /// The longest delay.
    pub max: Duration,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            workers: 4,
            depth: 32,
            jitter: None,
        }
    }
}

struct Job {
    tag: u64,
    seq: u64,
    page: u64,
    handle: Arc<OpenHandle>,
    reply: Sender<Completion>,
}

struct Completion {
    tag: u64,
    seq: u64,
    order: u64,
    result: Result<Vec<u8>>,
}

/// The pool of read workers. Dropping it stops the workers after the reads already queued.
pub struct FlashReader {
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
    next_tag: AtomicU64,
    completed: Arc<AtomicU64>,
    depth: usize,
}

impl std::fmt::Debug for FlashReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashReader")
            .field("workers", &self.workers.len())
            .field("depth", &self.depth)
            .finish()
    }
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl FlashReader {
    /// Starts the workers.
    pub fn new(config: ReaderConfig) -> FlashReader {
        let depth = config.depth.max(1);
        let (tx, rx) = sync_channel::<Job>(depth);
        let rx = Arc::new(Mutex::new(rx));
        let completed = Arc::new(AtomicU64::new(0));
        let workers = (0..config.workers.max(1))
            .map(|i| {
                let rx = Arc::clone(&rx);
                let completed = Arc::clone(&completed);
                let jitter = config.jitter;
                std::thread::Builder::new()
                    .name(format!("inpath-store-read-{i}"))
                    .spawn(move || worker(&rx, &completed, jitter))
                    .expect("spawn a read worker")
            })
            .collect();
        FlashReader {
            jobs: Some(tx),
            workers,
            next_tag: AtomicU64::new(0),
            completed,
            depth,
        }
    }

    /// Page reads completed so far (all ports).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Opens a port that yields `length` bytes at `offset` of `handle`, page by page, in order.
    /// The range must lie inside the file ([`StoreError::RangePastEnd`] otherwise).
    pub fn request(&self, handle: &Arc<OpenHandle>, offset: u64, length: u64) -> Result<Port<'_>> {
        handle.check_range(offset, length)?;
        let ps = handle.entry().page_size as u64;
        let end = offset + length;
        let (first, last) = if length == 0 {
            (0, 0)
        } else {
            (offset / ps, end.div_ceil(ps))
        };
        let (reply, rx) = channel();
        Ok(Port {
            reader: self,
            handle: Arc::clone(handle),
            offset,
            end,
            next_issue: first,
            next_deliver: first,
            last,
            first,
            early: BTreeMap::new(),
            tags: BTreeMap::new(),
            reply,
            rx,
        })
    }
}

fn worker(rx: &Mutex<Receiver<Job>>, completed: &AtomicU64, jitter: Option<Jitter>) {
    loop {
        let job = match rx.lock() {
            Ok(guard) => match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        if let Some(j) = jitter {
            let nanos = j.max.as_nanos().max(1) as u64;
            std::thread::sleep(Duration::from_nanos(mix(j.seed ^ mix(job.tag)) % nanos));
        }
        let mut page = Vec::new();
        let result = job.handle.read_page(job.page, &mut page).map(|()| page);
        let order = completed.fetch_add(1, Ordering::Relaxed);
        // A port that was dropped no longer listens: the read completes into nothing.
        let _ = job.reply.send(Completion {
            tag: job.tag,
            seq: job.seq,
            order,
            result,
        });
    }
}

impl Drop for FlashReader {
    fn drop(&mut self) {
        drop(self.jobs.take());
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// One page of a request, as its port hands it out.
#[derive(Debug)]
pub struct Chunk {
    /// The page read's tag.
    pub tag: u64,
    /// The logical page number.
    pub page: u64,
    /// The position of this read among all completions of the reader (0 = first to complete):
    /// shows the order the reads really finished in.
    pub completion: u64,
    data: Vec<u8>,
    start: usize,
    end: usize,
    offset: u64,
}

impl Chunk {
    /// The bytes of the request in this page.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// The file offset of `bytes()[0]`.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

/// The in-order port of one request (see the [module docs](self)).
pub struct Port<'r> {
    reader: &'r FlashReader,
    handle: Arc<OpenHandle>,
    offset: u64,
    end: u64,
    first: u64,
    next_issue: u64,
    next_deliver: u64,
    last: u64,
    early: BTreeMap<u64, Completion>,
    tags: BTreeMap<u64, u64>,
    reply: Sender<Completion>,
    rx: Receiver<Completion>,
}

impl std::fmt::Debug for Port<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("range", &(self.offset..self.end))
            .field("next_page", &self.next_deliver)
            .finish()
    }
}

impl Port<'_> {
    fn issue(&mut self) -> Result<()> {
        let jobs = self
            .reader
            .jobs
            .as_ref()
            .expect("a live reader has a queue");
        while self.next_issue < self.last
            && self.next_issue - self.next_deliver < self.reader.depth as u64
        {
            let tag = self.reader.next_tag.fetch_add(1, Ordering::Relaxed);
            let page = self.next_issue;
            let job = Job {
                tag,
                seq: page - self.first,
                page,
                handle: Arc::clone(&self.handle),
                reply: self.reply.clone(),
            };
            jobs.send(job)
                .map_err(|_| StoreError::ReaderStopped { tag })?;
            self.tags.insert(page - self.first, tag);
            self.next_issue += 1;
        }
        Ok(())
    }

    /// The next page of the request, in order; `None` after the last.
    pub fn next_chunk(&mut self) -> Option<Result<Chunk>> {
        if self.next_deliver >= self.last {
            return None;
        }
        if let Err(e) = self.issue() {
            return Some(Err(e));
        }
        let want = self.next_deliver - self.first;
        let done = loop {
            if let Some(c) = self.early.remove(&want) {
                break c;
            }
            match self.rx.recv() {
                Ok(c) if c.seq == want => break c,
                Ok(c) => {
                    let seq = c.seq;
                    let again = self.early.insert(seq, c);
                    assert!(again.is_none(), "page {seq} of a port completed twice");
                }
                // Unreachable while the port holds a sender; kept for clarity.
                Err(_) => {
                    let tag = self.tags.get(&want).copied().unwrap_or(0);
                    return Some(Err(StoreError::ReaderStopped { tag }));
                }
            }
        };
        self.tags.remove(&want);
        let page = self.next_deliver;
        self.next_deliver += 1;
        let data = match done.result {
            Ok(d) => d,
            Err(e) => {
                // An error ends the port.
                self.next_deliver = self.last;
                return Some(Err(e));
            }
        };
        let ps = self.handle.entry().page_size as u64;
        let page_start = page * ps;
        let start = (self.offset.max(page_start) - page_start) as usize;
        let end = (self.end.min(page_start + data.len() as u64) - page_start) as usize;
        Some(Ok(Chunk {
            tag: done.tag,
            page,
            completion: done.order,
            data,
            start,
            end,
            offset: page_start + start as u64,
        }))
    }
}

impl Iterator for Port<'_> {
    type Item = Result<Chunk>;
    fn next(&mut self) -> Option<Result<Chunk>> {
        self.next_chunk()
    }
}
