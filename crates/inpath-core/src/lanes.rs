//! Running one job across several threads ("lanes") and merging their states.
//!
//! The software analog of the reference systems' parallel pipelines: each lane owns a partial
//! state, receives only whole records, and the states merge exactly at the end, so the result
//! is the same for any lane count.

use crate::source::{read_full, Input, Source};
use crate::{Error, Lane, Result};
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// How to run lanes over a stream.
#[derive(Clone, Copy, Debug)]
pub struct LaneOptions {
    /// Number of lanes (threads), 1 or more.
    pub threads: usize,
    /// Bytes read per chunk. Each lane receives chunks of about this size.
    pub chunk_size: usize,
}

impl Default for LaneOptions {
    fn default() -> Self {
        LaneOptions {
            threads: 1,
            chunk_size: 1 << 20,
        }
    }
}

/// The most lanes a job may be split into.
pub const MAX_THREADS: usize = 256;

/// Checks a user's thread count.
pub fn check_threads(threads: usize) -> Result<()> {
    if (1..=MAX_THREADS).contains(&threads) {
        Ok(())
    } else {
        Err(Error::parameter(
            "threads",
            threads,
            format!("1 to {MAX_THREADS}"),
        ))
    }
}

/// Feeds the whole of `reader` into `engine` using `options.threads` lanes, then closes the
/// input ([`Lane::close_input`]) so `engine` holds the merged state of everything read. The
/// engine is not finished: more inputs may be merged into it. `progress` is called with the
/// number of bytes read so far.
pub fn run_reader<E: Lane>(
    engine: &mut E,
    reader: &mut dyn Read,
    path: &Path,
    options: LaneOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    check_threads(options.threads)?;
    let chunk_size = options.chunk_size.max(4096);
    let splittable = engine.framing().split_point(&[]).is_some();
    if options.threads == 1 || !splittable {
        let mut buf = vec![0u8; chunk_size];
        let mut total = 0u64;
        loop {
            let n = read_full(reader, &mut buf, path)?;
            if n == 0 {
                break;
            }
            engine.update(&buf[..n])?;
            total += n as u64;
            progress(total);
            if n < buf.len() {
                break;
            }
        }
        return engine.close_input();
    }

    let threads = options.threads;
    std::thread::scope(|scope| -> Result<()> {
        // Buffers travel main -> lane -> back to main through `free`, so memory stays bounded:
        // at most two buffers per lane exist at once.
        let (free_tx, free_rx) = mpsc::channel::<Vec<u8>>();
        let mut senders = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (tx, rx) = mpsc::sync_channel::<(Vec<u8>, usize)>(1);
            senders.push(tx);
            let mut lane = engine.fork();
            let free_tx = free_tx.clone();
            handles.push(scope.spawn(move || -> Result<E> {
                let mut failure = None;
                for (buf, len) in rx {
                    if failure.is_none() {
                        if let Err(e) = lane.update(&buf[..len]) {
                            failure = Some(e);
                        }
                    }
                    let _ = free_tx.send(buf);
                }
                match failure {
                    Some(e) => Err(e),
                    // A lane only ever receives whole records, so closing it flushes
                    // whatever it batched and never finds a partial record.
                    None => lane.close_input().map(|_| lane),
                }
            }));
        }
        drop(free_tx);
        // A pool of 2 buffers per lane; `free_rx` only blocks when all are in flight.
        let mut pool: Vec<Vec<u8>> = (0..2 * threads).map(|_| vec![0u8; chunk_size]).collect();
        let mut carry: Vec<u8> = Vec::new();
        let mut total = 0u64;
        let mut next = 0usize;
        let mut read_error = None;
        loop {
            let mut buf = match pool.pop() {
                Some(buf) => buf,
                None => match free_rx.recv() {
                    Ok(buf) => buf,
                    Err(_) => break, // every lane has gone: they failed; errors come from join
                },
            };
            if buf.len() < carry.len() + chunk_size {
                buf.resize(carry.len() + chunk_size, 0);
            }
            buf[..carry.len()].copy_from_slice(&carry);
            let start = carry.len();
            let n = match read_full(reader, &mut buf[start..start + chunk_size], path) {
                Ok(n) => n,
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            };
            total += n as u64;
            progress(total);
            let filled = start + n;
            let cut = engine
                .framing()
                .split_point(&buf[..filled])
                .unwrap_or(filled);
            if filled - cut > crate::framing::MAX_RECORD {
                read_error = Some(Error::RecordTooLong {
                    what: format!("a line of {}", path.display()),
                    limit: crate::framing::MAX_RECORD,
                });
                break;
            }
            carry.clear();
            carry.extend_from_slice(&buf[cut..filled]);
            let at_end = n < chunk_size;
            if cut > 0 {
                if senders[next].send((buf, cut)).is_err() {
                    break;
                }
                next = (next + 1) % threads;
            } else {
                pool.push(buf);
            }
            if at_end {
                break;
            }
        }
        drop(senders);
        let mut first_error = read_error;
        for handle in handles {
            match handle.join() {
                Ok(Ok(lane)) => {
                    if first_error.is_none() {
                        if let Err(e) = engine.merge(&lane) {
                            first_error = Some(e);
                        }
                    }
                }
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        // The unfinished tail (an unterminated line, or the leftover bytes of a partial item)
        // goes to the merged engine, whose close_input accepts or reports it.
        engine.update(&carry)?;
        engine
            .close_input()
            .map_err(|e| count_whole_records(e, total))
    })
}

/// Feeds `data`, held in memory, into `engine` across `threads` lanes: the slice is cut into
/// `threads` contiguous parts at record boundaries. Closes the input like [`run_reader`].
pub fn run_slice<E: Lane>(engine: &mut E, data: &[u8], threads: usize) -> Result<()> {
    let options = LaneOptions {
        threads,
        ..LaneOptions::default()
    };
    run_parts(engine, data, options, &mut |_| {})
}

/// Feeds the whole of one input into `engine` through the path that suits it (see
/// [`crate::source`]): a mapped file is cut into `options.threads` contiguous parts read in
/// place by the lanes; a stream is read by a reader that overlaps with compute. Closes the
/// input like [`run_reader`] and returns the number of bytes read. The result is the same
/// whichever path the input took.
pub fn run_input<E: Lane>(
    engine: &mut E,
    input: &Input,
    options: LaneOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    check_threads(options.threads)?;
    run_source(engine, input.source()?, input.path(), options, progress)
}

/// [`run_input`] for an input already opened with [`Input::source`] (`path` names it in
/// messages): lets a command open every input, and fail on a missing one, before it starts.
pub fn run_source<E: Lane>(
    engine: &mut E,
    source: Source,
    path: &Path,
    options: LaneOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    check_threads(options.threads)?;
    let splittable = engine.framing().split_point(&[]).is_some();
    let source = match source {
        // Several lanes over a file that is not in the page cache: each lane would fault its
        // own distant region in from the disk, one page-cache miss at a time, slower than one
        // sequential reader with the kernel's read-ahead (measured in docs/PERFORMANCE.md,
        // "I/O path"). Read it as a stream instead.
        Source::Mapped(map) if options.threads > 1 && splittable && !map.mostly_cached() => {
            let len = map.bytes().len() as u64;
            Source::Stream {
                reader: Box::new(map.into_file()),
                len: Some(len),
            }
        }
        other => other,
    };
    match source {
        Source::Mapped(map) => {
            let result = run_parts(engine, map.bytes(), options, progress);
            // A file truncated under the mapping was partly read as zeros: that comes first,
            // before any error the zeros themselves caused.
            map.check_unchanged()?;
            result.map(|()| map.bytes().len() as u64)
        }
        Source::Stream { reader, .. } => {
            if options.threads > 1 && splittable {
                // The calling thread reads while the lanes compute: already overlapped.
                let mut total = 0u64;
                let mut reader = reader;
                run_reader(engine, &mut *reader, path, options, &mut |n| {
                    total = n;
                    progress(n)
                })?;
                Ok(total)
            } else {
                run_overlapped(engine, reader, path, options.chunk_size, progress)
            }
        }
    }
}

/// One lane fed by a reader thread ([`Source::for_each_chunk`]): the next chunk is read
/// while this one is computed, in reused buffers.
fn run_overlapped<E: Lane>(
    engine: &mut E,
    reader: Box<dyn Read + Send>,
    path: &Path,
    chunk_size: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    let source = Source::Stream { reader, len: None };
    let mut total = 0u64;
    source.for_each_chunk(path, chunk_size.max(4096), |chunk| {
        engine.update(chunk)?;
        total += chunk.len() as u64;
        progress(total);
        Ok::<(), Error>(())
    })?;
    engine.close_input()?;
    Ok(total)
}

/// Bytes a mapped lane hands its engine per call (progress is reported between calls).
const MAPPED_STEP: usize = 4 << 20;

/// Feeds `part` to `engine` in steps cut at record boundaries where the framing allows,
/// adding each step's length to `done`.
fn feed_steps<E: Lane>(
    engine: &mut E,
    part: &[u8],
    step: usize,
    done: &AtomicU64,
    mut after_step: impl FnMut(),
) -> Result<()> {
    let mut at = 0;
    while at < part.len() {
        let aim = (at + step).min(part.len());
        let end = if aim == part.len() {
            aim
        } else {
            match engine.framing().split_point(&part[at..aim]) {
                Some(cut) if cut > 0 => at + cut,
                _ => aim,
            }
        };
        engine.update(&part[at..end])?;
        done.fetch_add((end - at) as u64, Ordering::Relaxed);
        at = end;
        after_step();
    }
    Ok(())
}

/// Feeds `data` into `engine` across `options.threads` lanes over contiguous parts cut at
/// record boundaries, the calling thread running the first part and reporting progress.
fn run_parts<E: Lane>(
    engine: &mut E,
    data: &[u8],
    options: LaneOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    check_threads(options.threads)?;
    let step = options.chunk_size.max(MAPPED_STEP);
    let splittable = engine.framing().split_point(&[]).is_some();
    let threads = options.threads;
    let done = AtomicU64::new(0);
    if threads == 1 || !splittable || data.is_empty() {
        feed_steps(engine, data, step, &done, || {
            progress(done.load(Ordering::Relaxed))
        })?;
        return engine.close_input();
    }
    // Cut points: aim for equal parts, then move each cut back to a record boundary.
    let mut cuts = vec![0usize];
    for t in 1..threads {
        let aim = data.len() * t / threads;
        let prev = *cuts.last().expect("cuts starts non-empty");
        let aim = aim.max(prev);
        let cut = prev
            + engine
                .framing()
                .split_point(&data[prev..aim])
                .unwrap_or(aim - prev);
        cuts.push(cut);
    }
    let whole_end = {
        let last = *cuts.last().expect("cuts starts non-empty");
        last + engine
            .framing()
            .split_point(&data[last..])
            .unwrap_or(data.len() - last)
    };
    cuts.push(whole_end);
    let lanes: Vec<Result<E>> = std::thread::scope(|scope| {
        let done = &done;
        // Each lane holds a sender until it ends (returns or panics): the receiver learns the
        // moment the last one ends. (Polling `is_finished` every 20 ms here cost up to 20 ms
        // a call: 16 x 2M u32 through corr took 36 ms on two lanes against 31 on one.)
        let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
        let handles: Vec<_> = cuts
            .windows(2)
            .skip(1)
            .map(|w| {
                let part = &data[w[0]..w[1]];
                let mut lane = engine.fork();
                let ended_tx = ended_tx.clone();
                scope.spawn(move || -> Result<E> {
                    let _ended_tx = ended_tx;
                    feed_steps(&mut lane, part, step, done, || {})?;
                    lane.close_input()?;
                    Ok(lane)
                })
            })
            .collect();
        drop(ended_tx);
        // The first part runs here, so that progress can be reported as the lanes go.
        let mut first = engine.fork();
        let first_result = feed_steps(&mut first, &data[..cuts[1]], step, done, || {
            progress(done.load(Ordering::Relaxed))
        })
        .and_then(|()| first.close_input())
        .map(|()| first);
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            ended.recv_timeout(std::time::Duration::from_millis(20))
        {
            progress(done.load(Ordering::Relaxed));
        }
        progress(done.load(Ordering::Relaxed));
        std::iter::once(first_result)
            .chain(handles.into_iter().map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            }))
            .collect()
    });
    for lane in lanes {
        engine.merge(&lane?)?;
    }
    engine.update(&data[whole_end..])?;
    progress(data.len() as u64);
    engine
        .close_input()
        .map_err(|e| count_whole_records(e, data.len() as u64))
}

/// The merged engine only saw the tail, so its count of whole records before leftover bytes
/// covers none of the lanes' records: recompute it from the bytes of the whole stream.
fn count_whole_records(error: Error, total_bytes: u64) -> Error {
    match error {
        Error::TrailingBytes {
            trailing, width, ..
        } => Error::TrailingBytes {
            trailing,
            width,
            complete: (total_bytes - trailing as u64) / width as u64,
        },
        other => other,
    }
}
