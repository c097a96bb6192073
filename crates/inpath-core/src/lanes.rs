//! Running one job across several threads ("lanes") and merging their states.
//!
//! The software analog of the reference systems' parallel pipelines: each lane owns a partial
//! state, receives only whole records, and the states merge exactly at the end, so the result
//! is the same for any lane count.

use crate::source::read_full;
use crate::{Error, Lane, Result};
use std::io::Read;
use std::path::Path;
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
        LaneOptions { threads: 1, chunk_size: 1 << 20 }
    }
}

/// The most lanes a job may be split into.
pub const MAX_THREADS: usize = 256;

/// Checks a user's thread count.
pub fn check_threads(threads: usize) -> Result<()> {
    if (1..=MAX_THREADS).contains(&threads) {
        Ok(())
    } else {
        Err(Error::parameter("threads", threads, format!("1 to {MAX_THREADS}")))
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
            let cut = engine.framing().split_point(&buf[..filled]).unwrap_or(filled);
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
        engine.close_input().map_err(|e| count_whole_records(e, total))
    })
}

/// Feeds `data`, held in memory, into `engine` across `threads` lanes: the slice is cut into
/// `threads` contiguous parts at record boundaries. Closes the input like [`run_reader`].
pub fn run_slice<E: Lane>(engine: &mut E, data: &[u8], threads: usize) -> Result<()> {
    check_threads(threads)?;
    let splittable = engine.framing().split_point(&[]).is_some();
    if threads == 1 || !splittable || data.is_empty() {
        engine.update(data)?;
        return engine.close_input();
    }
    // Cut points: aim for equal parts, then move each cut back to a record boundary.
    let mut cuts = vec![0usize];
    for t in 1..threads {
        let aim = data.len() * t / threads;
        let prev = *cuts.last().expect("cuts starts non-empty");
        let aim = aim.max(prev);
        let cut = prev + engine.framing().split_point(&data[prev..aim]).unwrap_or(aim - prev);
        cuts.push(cut);
    }
    let whole_end = {
        let last = *cuts.last().expect("cuts starts non-empty");
        last + engine.framing().split_point(&data[last..]).unwrap_or(data.len() - last)
    };
    cuts.push(whole_end);
    let lanes: Vec<Result<E>> = std::thread::scope(|scope| {
        let handles: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let part = &data[w[0]..w[1]];
                let mut lane = engine.fork();
                scope.spawn(move || -> Result<E> {
                    lane.update(part)?;
                    lane.close_input()?;
                    Ok(lane)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    for lane in lanes {
        engine.merge(&lane?)?;
    }
    engine.update(&data[whole_end..])?;
    engine.close_input().map_err(|e| count_whole_records(e, data.len() as u64))
}

/// The merged engine only saw the tail, so its count of whole records before leftover bytes
/// covers none of the lanes' records: recompute it from the bytes of the whole stream.
fn count_whole_records(error: Error, total_bytes: u64) -> Error {
    match error {
        Error::TrailingBytes { trailing, width, .. } => Error::TrailingBytes {
            trailing,
            width,
            complete: (total_bytes - trailing as u64) / width as u64,
        },
        other => other,
    }
}
