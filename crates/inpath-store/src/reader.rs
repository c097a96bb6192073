//! The Flash Server read interface: requests `(handle, offset, length)` become tagged page
//! reads served by a pool of `pread` workers; reads complete in any order and each request's
//! pages come out of its own [`Port`] in order.
//!
//! - **Tags.** Every read gets a tag (a number unique within the reader) and completes
//!   exactly once, with its pages or its error. A read covers one page or a run of pages
//!   stored back to back, up to [`ReaderConfig::segment`] bytes (256 KiB by default): fewer
//!   system calls per byte, and pages of a sealed run are unsealed by the worker.
//! - **Buffers** are reused: a chunk gives its buffer back to the reader when it is dropped.
//! - **`O_DIRECT`** ([`ReaderConfig::direct`]): reads bypass the page cache, aligned to
//!   4 KiB, for cold scans that should not evict what the cache holds.
//! - **Queue depth.** At most `depth` page reads wait for a worker (a bounded queue shared by
//!   all ports), and a port keeps at most `depth` of its own reads outstanding: it issues the
//!   next read as the consumer takes one, so a slow consumer holds back only its own port.
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
use crate::store::{OpenHandle, RunBuffers};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

/// The reader's shape.
#[derive(Clone, Debug)]
pub struct ReaderConfig {
    /// `pread` worker threads (at least 1).
    pub workers: usize,
    /// Queue depth: reads waiting for a worker, and outstanding reads per port (at least 1).
    pub depth: usize,
    /// The most stored bytes one read fetches: a read (one tag) covers consecutive pages
    /// stored back to back up to this size, always at least one page. One page per read
    /// is BlueDBM's flash page; bigger reads cost fewer system calls per byte.
    pub segment: u64,
    /// Read the data files with `O_DIRECT`: past the page cache, into aligned buffers.
    pub direct: bool,
    /// Let kernels over a handle read its data file through a memory map, in the lane's own
    /// thread, instead of through the workers (see [`crate::kernel::run`]). Ignored when
    /// `direct` is set.
    pub mapped: bool,
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

/// Default [`ReaderConfig::segment`]: 256 KiB, 32 pages of 8 KiB.
pub const DEFAULT_SEGMENT: u64 = 256 << 10;
/// The most read workers a reader starts (more are clamped to this).
pub const MAX_WORKERS: usize = 64;
/// The largest read one worker makes (more is clamped to this).
pub const MAX_SEGMENT: u64 = 64 << 20;

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            workers: 4,
            depth: 32,
            segment: DEFAULT_SEGMENT,
            direct: false,
            mapped: true,
            jitter: None,
        }
    }
}

struct Job {
    tag: u64,
    seq: u64,
    pages: Range<u64>,
    handle: Arc<OpenHandle>,
    reply: Sender<Completion>,
}

struct Completion {
    tag: u64,
    seq: u64,
    order: u64,
    result: Result<(Vec<u8>, Range<usize>)>,
}

/// Read buffers handed back by dropped chunks, so steady reading allocates nothing.
#[derive(Default)]
struct Pool(Mutex<Vec<Vec<u8>>>);

/// How many spare buffers the pool keeps.
const POOL_KEEP: usize = 64;

impl Pool {
    fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .ok()
            .and_then(|mut v| v.pop())
            .unwrap_or_default()
    }

    fn give(&self, buf: Vec<u8>) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() < POOL_KEEP && buf.capacity() > 0 {
                v.push(buf);
            }
        }
    }
}

/// Counters of a reader, for all its ports together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderCounters {
    /// Reads (tags) completed.
    pub reads: u64,
    /// Pages those reads covered.
    pub pages: u64,
    /// Stored bytes those reads fetched from the data files.
    pub bytes: u64,
    /// Reads issued and not yet completed, now.
    pub in_flight: u64,
}

#[derive(Default)]
struct Counters {
    completed: AtomicU64,
    pages: AtomicU64,
    bytes: AtomicU64,
    issued: AtomicU64,
}

/// The pool of read workers. Dropping it stops the workers after the reads already queued.
pub struct FlashReader {
    jobs: Option<SyncSender<Job>>,
    /// The queue the workers take jobs from, kept to start them on the first request.
    queue: Arc<Mutex<Receiver<Job>>>,
    /// The worker threads, started by the first read asked for: a command whose kernels read
    /// the mapped file never starts them (4 threads and their stacks, ~0.5 ms of a short
    /// search).
    workers: OnceLock<Vec<JoinHandle<()>>>,
    next_tag: AtomicU64,
    counters: Arc<Counters>,
    pool: Arc<Pool>,
    config: ReaderConfig,
}

impl std::fmt::Debug for FlashReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashReader")
            .field("workers", &self.config.workers)
            .field("depth", &self.config.depth)
            .field("segment", &self.config.segment)
            .field("direct", &self.config.direct)
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
    /// A reader; its workers start with the first read asked for.
    pub fn new(config: ReaderConfig) -> FlashReader {
        let config = ReaderConfig {
            workers: config.workers.clamp(1, MAX_WORKERS),
            depth: config.depth.max(1),
            segment: config.segment.clamp(1, MAX_SEGMENT),
            ..config
        };
        let (tx, rx) = sync_channel::<Job>(config.depth);
        FlashReader {
            jobs: Some(tx),
            queue: Arc::new(Mutex::new(rx)),
            workers: OnceLock::new(),
            next_tag: AtomicU64::new(0),
            counters: Arc::new(Counters::default()),
            pool: Arc::new(Pool::default()),
            config,
        }
    }

    /// Starts the worker threads once (the system may allow fewer than configured; none is
    /// an error, named by the read that needed them).
    fn start_workers(&self) -> Result<()> {
        let mut refused = None;
        let workers = self.workers.get_or_init(|| {
            let mut workers = Vec::with_capacity(self.config.workers);
            for i in 0..self.config.workers {
                let rx = Arc::clone(&self.queue);
                let counters = Arc::clone(&self.counters);
                let pool = Arc::clone(&self.pool);
                let (jitter, direct) = (self.config.jitter, self.config.direct);
                let spawned = std::thread::Builder::new()
                    .name(format!("inpath-store-read-{i}"))
                    .spawn(move || worker(&rx, &counters, &pool, jitter, direct));
                match spawned {
                    Ok(handle) => workers.push(handle),
                    // The system allows no more threads: the reader runs with those it has.
                    Err(e) => {
                        refused = Some(e.to_string());
                        break;
                    }
                }
            }
            workers
        });
        if workers.is_empty() {
            return Err(StoreError::ReadWorkers {
                detail: refused.unwrap_or_else(|| "refused before".into()),
            });
        }
        Ok(())
    }

    /// The reader's configuration (with its minimums applied).
    pub fn config(&self) -> &ReaderConfig {
        &self.config
    }

    /// Reads completed so far (all ports).
    pub fn completed(&self) -> u64 {
        self.counters.completed.load(Ordering::Relaxed)
    }

    /// The reader's counters now.
    pub fn counters(&self) -> ReaderCounters {
        let reads = self.completed();
        ReaderCounters {
            reads,
            pages: self.counters.pages.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
            in_flight: self
                .counters
                .issued
                .load(Ordering::Relaxed)
                .saturating_sub(reads),
        }
    }

    /// Opens a port that yields `length` bytes at `offset` of `handle` in order, a read (one
    /// or more whole pages, see [`ReaderConfig::segment`]) at a time. The range must lie inside
    /// the file ([`StoreError::RangePastEnd`] otherwise).
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
            next_page: first,
            last,
            next_seq: 0,
            issued: VecDeque::new(),
            early: BTreeMap::new(),
            reply,
            rx,
        })
    }
}

fn worker(
    rx: &Mutex<Receiver<Job>>,
    counters: &Counters,
    pool: &Pool,
    jitter: Option<Jitter>,
    direct: bool,
) {
    let mut bufs = RunBuffers::default();
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
        let mut buf = pool.take();
        let result = match job
            .handle
            .read_run(job.pages.clone(), direct, &mut buf, &mut bufs)
        {
            Ok(range) => Ok((buf, range)),
            Err(e) => {
                pool.give(buf);
                Err(e)
            }
        };
        if result.is_ok() {
            let ex = &job.handle.entry().extents;
            let stored: u64 = job.pages.clone().map(|p| ex[p as usize].len as u64).sum();
            counters.bytes.fetch_add(stored, Ordering::Relaxed);
            counters
                .pages
                .fetch_add(job.pages.end - job.pages.start, Ordering::Relaxed);
        }
        let order = counters.completed.fetch_add(1, Ordering::Relaxed);
        // A port that was dropped no longer listens: the read completes into nothing.
        if let Err(lost) = job.reply.send(Completion {
            tag: job.tag,
            seq: job.seq,
            order,
            result,
        }) {
            if let Ok((buf, _)) = lost.0.result {
                pool.give(buf);
            }
        }
    }
}

impl Drop for FlashReader {
    fn drop(&mut self) {
        drop(self.jobs.take());
        for w in self.workers.take().unwrap_or_default() {
            let _ = w.join();
        }
    }
}

/// One read of a request, as its port hands it out: one or more whole pages, cut to the
/// request's range. Dropping it gives its buffer back to the reader.
pub struct Chunk {
    /// The read's tag.
    pub tag: u64,
    /// The first logical page of the read.
    pub page: u64,
    /// How many pages the read covers.
    pub pages: u64,
    /// The position of this read among all completions of the reader (0 = first to complete):
    /// shows the order the reads really finished in.
    pub completion: u64,
    data: Vec<u8>,
    range: Range<usize>,
    offset: u64,
    pool: Arc<Pool>,
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("tag", &self.tag)
            .field("pages", &(self.page..self.page + self.pages))
            .field("offset", &self.offset)
            .field("len", &self.range.len())
            .finish()
    }
}

impl Chunk {
    /// The bytes of the request in this read.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.range.clone()]
    }

    /// The file offset of `bytes()[0]`.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        self.pool.give(std::mem::take(&mut self.data));
    }
}

/// The in-order port of one request (see the [module docs](self)).
pub struct Port<'r> {
    reader: &'r FlashReader,
    handle: Arc<OpenHandle>,
    offset: u64,
    end: u64,
    /// The first page not yet asked for, and the end of the request's pages.
    next_page: u64,
    last: u64,
    next_seq: u64,
    /// Reads asked for and not yet handed out, in order: (seq, pages, tag).
    issued: VecDeque<(u64, Range<u64>, u64)>,
    early: BTreeMap<u64, Completion>,
    reply: Sender<Completion>,
    rx: Receiver<Completion>,
}

impl std::fmt::Debug for Port<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("range", &(self.offset..self.end))
            .field("outstanding", &self.issued.len())
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
        while self.next_page < self.last && self.issued.len() < self.reader.config.depth {
            self.reader.start_workers()?;
            let tag = self.reader.next_tag.fetch_add(1, Ordering::Relaxed);
            let start = self.next_page;
            let end = self
                .handle
                .run_end(start, self.last, self.reader.config.segment);
            let seq = self.next_seq;
            let job = Job {
                tag,
                seq,
                pages: start..end,
                handle: Arc::clone(&self.handle),
                reply: self.reply.clone(),
            };
            jobs.send(job)
                .map_err(|_| StoreError::ReaderStopped { tag })?;
            self.reader.counters.issued.fetch_add(1, Ordering::Relaxed);
            self.issued.push_back((seq, start..end, tag));
            self.next_seq += 1;
            self.next_page = end;
        }
        Ok(())
    }

    /// The next read of the request, in order; `None` after the last.
    pub fn next_chunk(&mut self) -> Option<Result<Chunk>> {
        if let Err(e) = self.issue() {
            self.next_page = self.last;
            self.issued.clear();
            return Some(Err(e));
        }
        let (want, pages, tag) = self.issued.pop_front()?;
        let done = loop {
            if let Some(c) = self.early.remove(&want) {
                break c;
            }
            match self.rx.recv() {
                Ok(c) if c.seq == want => break c,
                Ok(c) => {
                    let seq = c.seq;
                    let again = self.early.insert(seq, c);
                    assert!(again.is_none(), "read {seq} of a port completed twice");
                }
                // Unreachable while the port holds a sender; kept for clarity.
                Err(_) => return Some(Err(StoreError::ReaderStopped { tag })),
            }
        };
        let (data, range) = match done.result {
            Ok(d) => d,
            Err(e) => {
                // An error ends the port; reads still outstanding complete into nothing.
                self.next_page = self.last;
                self.issued.clear();
                return Some(Err(e));
            }
        };
        let ps = self.handle.entry().page_size as u64;
        let base = pages.start * ps;
        let lo = self.offset.max(base) - base;
        let hi = self.end.min(base + range.len() as u64) - base;
        Some(Ok(Chunk {
            tag: done.tag,
            page: pages.start,
            pages: pages.end - pages.start,
            completion: done.order,
            range: range.start + lo as usize..range.start + hi as usize,
            data,
            offset: base + lo,
            pool: Arc::clone(&self.reader.pool),
        }))
    }
}

impl Iterator for Port<'_> {
    type Item = Result<Chunk>;
    fn next(&mut self) -> Option<Result<Chunk>> {
        self.next_chunk()
    }
}
