//! A device in a process of its own: [`ProcessDevice`] (the host's side) hands Table Task
//! graphs over a pipe to [`serve`] (the device's side, a [`LocalDevice`] in another process),
//! and the rows come back as Arrow IPC. The device's pages, build rows and group tables are
//! then held in its process, as AQUOMAN's are in the flash device's DRAM, and the host's
//! memory is only what the host plan holds.
//!
//! The pipe carries frames, each `u32` length (little-endian, of what follows), a kind byte, a
//! `u64` id (little-endian) and a payload. Host to device: `SUBMIT` (a graph as JSON, under a
//! new id), `CANCEL` (a graph's id), `STATS` (a request id), `RESET` (no payload). Device to
//! host: `HELLO` first (JSON: protocol version, memory budget, lanes), then per graph any
//! `BATCH` (one record batch as an Arrow IPC stream), at most one `ERROR` (JSON: whether the
//! device declined, and why) and an `END`; `STATS` replies (JSON [`DeviceStats`]).

use crate::device::{Device, DeviceStats, DeviceStream, LocalDevice};
use crate::graph::TaskGraph;
use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use inpath_table::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The pipe protocol's version, in `HELLO`.
pub const PROTOCOL_VERSION: u32 = 1;

const SUBMIT: u8 = 1;
const CANCEL: u8 = 2;
const STATS: u8 = 3;
const RESET: u8 = 4;
const HELLO: u8 = 10;
const BATCH: u8 = 11;
const ERROR: u8 = 12;
const END: u8 = 13;
const STATS_REPLY: u8 = 14;

/// The largest frame either side accepts (a batch of a NOP task's rows stays far below).
const MAX_FRAME: u32 = 1 << 30;

/// How long the host waits for a stats reply or for the device process to exit.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize)]
struct Hello {
    protocol: u32,
    memory_budget: u64,
    lanes: usize,
}

#[derive(Serialize, Deserialize)]
struct Failure {
    declined: bool,
    detail: String,
}

fn pipe_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Offload {
        detail: format!("device process: {what}: {e}"),
    }
}

fn write_frame(out: &mut impl Write, kind: u8, id: u64, payload: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(1 + 8 + payload.len())
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("a frame beyond 1 GiB"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&[kind])?;
    out.write_all(&id.to_le_bytes())?;
    out.write_all(payload)?;
    out.flush()
}

/// The next frame, or `None` at a clean end of the pipe (between frames).
fn read_frame(input: &mut impl Read) -> std::io::Result<Option<(u8, u64, Vec<u8>)>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if !(9..=MAX_FRAME).contains(&len) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (9 to {MAX_FRAME})"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    input.read_exact(&mut body)?;
    let id = u64::from_le_bytes(body[1..9].try_into().expect("8 bytes"));
    let kind = body[0];
    body.drain(..9);
    Ok(Some((kind, id, body)))
}

fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut w = StreamWriter::try_new(&mut bytes, &batch.schema())
        .map_err(|e| pipe_error("cannot encode a batch", e))?;
    w.write(batch)
        .and_then(|()| w.finish())
        .map_err(|e| pipe_error("cannot encode a batch", e))?;
    drop(w);
    Ok(bytes)
}

fn decode_batch(bytes: &[u8]) -> Result<RecordBatch> {
    let mut r = StreamReader::try_new(bytes, None)
        .map_err(|e| pipe_error("a batch that does not decode", e))?;
    match r.next() {
        Some(b) => b.map_err(|e| pipe_error("a batch that does not decode", e)),
        None => Err(pipe_error("a batch frame", "holds no batch")),
    }
}

/// Serves `device` over a pipe: frames from `input`, replies to `output`, until `input` ends
/// (the host closed it). Each graph runs on a thread of its own, so a host may read several
/// graphs' rows at once and cancel any of them.
pub fn serve(
    device: LocalDevice,
    input: impl Read,
    output: impl Write + Send + 'static,
) -> Result<()> {
    let device = Arc::new(device);
    let output: Arc<Mutex<Box<dyn Write + Send>>> =
        Arc::new(Mutex::new(Box::new(BufWriter::new(output))));
    let send = move |out: &Mutex<Box<dyn Write + Send>>, kind: u8, id: u64, payload: &[u8]| {
        write_frame(&mut *lock(out), kind, id, payload).is_ok()
    };
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        memory_budget: device.memory_budget(),
        lanes: device.lanes(),
    };
    let hello = serde_json::to_vec(&hello).map_err(|e| pipe_error("hello", e))?;
    if !send(&output, HELLO, 0, &hello) {
        return Err(pipe_error("cannot write to the host", "the pipe is closed"));
    }
    let running: Arc<Mutex<HashMap<u64, Arc<AtomicBool>>>> = Default::default();
    let mut input = BufReader::new(input);
    loop {
        let frame = read_frame(&mut input).map_err(|e| pipe_error("reading from the host", e))?;
        let Some((kind, id, payload)) = frame else {
            break;
        };
        match kind {
            SUBMIT => {
                // The graph is known from here on: a CANCEL that arrives while it is still
                // being read or its builds run is kept, and stops it once its lanes start.
                let cancelled = Arc::new(AtomicBool::new(false));
                lock(&running).insert(id, cancelled.clone());
                let (device, out, graphs) = (device.clone(), output.clone(), running.clone());
                let fail = move |out: &Mutex<Box<dyn Write + Send>>, e: Error| {
                    let failure = match e {
                        Error::DeviceDeclined { detail, .. } => Failure {
                            declined: true,
                            detail,
                        },
                        e => Failure {
                            declined: false,
                            detail: e.to_string(),
                        },
                    };
                    let bytes = serde_json::to_vec(&failure).unwrap_or_default();
                    send(out, ERROR, id, &bytes)
                };
                let spawned = std::thread::Builder::new()
                    .name("inpath-device-serve".into())
                    .spawn(move || {
                        let started = std::str::from_utf8(&payload)
                            .map_err(|e| pipe_error("a graph that is not UTF-8", e))
                            .and_then(TaskGraph::from_json)
                            .and_then(|graph| device.submit(&graph));
                        let output = out;
                        match started {
                            Err(e) => {
                                lock(&graphs).remove(&id);
                                fail(&output, e);
                            }
                            Ok(stream) => {
                                {
                                    let mut graphs = lock(&graphs);
                                    if cancelled.load(Ordering::Relaxed) {
                                        stream.cancel.store(true, Ordering::Relaxed);
                                    }
                                    graphs.insert(id, stream.cancel.clone());
                                }
                                for item in stream {
                                    let sent = match item.and_then(|b| encode_batch(&b)) {
                                        Ok(bytes) => send(&output, BATCH, id, &bytes),
                                        Err(e) => {
                                            fail(&output, e);
                                            false
                                        }
                                    };
                                    if !sent {
                                        break;
                                    }
                                }
                                lock(&graphs).remove(&id);
                            }
                        }
                        send(&output, END, id, &[]);
                    });
                if let Err(e) = spawned {
                    lock(&running).remove(&id);
                    let failure = Failure {
                        declined: false,
                        detail: format!("cannot start a thread for the graph: {e}"),
                    };
                    let bytes = serde_json::to_vec(&failure).unwrap_or_default();
                    send(&output, ERROR, id, &bytes);
                    send(&output, END, id, &[]);
                }
            }
            CANCEL => {
                if let Some(flag) = lock(&running).get(&id) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            STATS => {
                let mut stats = device.stats();
                stats.process_peak_rss = own_peak_rss();
                let bytes = serde_json::to_vec(&stats).map_err(|e| pipe_error("stats", e))?;
                send(&output, STATS_REPLY, id, &bytes);
            }
            RESET => device.reset_stats(),
            other => {
                return Err(pipe_error(
                    "a frame of an unknown kind",
                    format!("{other} (this build knows 1 to 4)"),
                ))
            }
        }
    }
    // The host is gone: stop what still runs (its lanes stop at their next page).
    for flag in lock(&running).values() {
        flag.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// This process's peak resident set in bytes (VmHWM), or 0 where the system does not say.
fn own_peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Where the rows and replies of each id go.
#[derive(Default)]
struct Routes {
    graphs: HashMap<u64, Sender<Result<RecordBatch>>>,
    stats: HashMap<u64, SyncSender<DeviceStats>>,
    /// Why the device process can no longer answer, once it cannot.
    gone: Option<String>,
}

/// A device in a process of its own, started from a command that runs [`serve`] on its
/// standard input and output (`inpath query serve-device`). Dropping it closes the pipe; the
/// process then stops its graphs and exits.
pub struct ProcessDevice {
    child: Mutex<Option<Child>>,
    input: Arc<Mutex<Option<Box<dyn Write + Send>>>>,
    routes: Arc<Mutex<Routes>>,
    next_id: AtomicU64,
    memory_budget: u64,
    lanes: usize,
}

impl std::fmt::Debug for ProcessDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessDevice")
            .field("memory_budget", &self.memory_budget)
            .field("lanes", &self.lanes)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ProcessDevice {
    /// Starts `command` (its standard input and output become the pipe; its standard error
    /// is the host's) and waits for its `HELLO`.
    pub fn spawn(mut command: Command) -> Result<ProcessDevice> {
        let shown = format!("{command:?}");
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| pipe_error(&format!("cannot start {shown}"), e))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(pipe_error("cannot start", "no pipe to the process"));
            }
        };
        match ProcessDevice::connect(stdin, stdout) {
            Ok(device) => {
                *lock(&device.child) = Some(child);
                Ok(device)
            }
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().ok();
                Err(match status {
                    Some(s) if !s.success() => {
                        pipe_error("did not start", format!("{shown} exited ({s}): {e}"))
                    }
                    _ => e,
                })
            }
        }
    }

    /// A device served at the other end of `to_device` and `from_device` (by [`serve`]):
    /// waits for its `HELLO`.
    pub fn connect(
        to_device: impl Write + Send + 'static,
        from_device: impl Read + Send + 'static,
    ) -> Result<ProcessDevice> {
        let mut from_device = BufReader::new(from_device);
        let hello = match read_frame(&mut from_device) {
            Ok(Some((HELLO, _, payload))) => serde_json::from_slice::<Hello>(&payload)
                .map_err(|e| pipe_error("a hello that does not decode", e))?,
            Ok(Some((kind, _, _))) => {
                return Err(pipe_error(
                    "did not say hello",
                    format!("a frame of kind {kind}"),
                ))
            }
            Ok(None) => return Err(pipe_error("did not say hello", "the pipe closed")),
            Err(e) => return Err(pipe_error("did not say hello", e)),
        };
        if hello.protocol != PROTOCOL_VERSION {
            return Err(pipe_error(
                "cannot be used",
                format!(
                    "it speaks protocol {} (this build speaks {PROTOCOL_VERSION})",
                    hello.protocol
                ),
            ));
        }
        let routes: Arc<Mutex<Routes>> = Default::default();
        let reader_routes = routes.clone();
        std::thread::Builder::new()
            .name("inpath-device-pipe".into())
            .spawn(move || read_replies(from_device, &reader_routes))
            .map_err(|e| pipe_error("cannot start the pipe's reader", e))?;
        Ok(ProcessDevice {
            child: Mutex::new(None),
            input: Arc::new(Mutex::new(Some(Box::new(to_device)))),
            routes,
            next_id: AtomicU64::new(1),
            memory_budget: hello.memory_budget,
            lanes: hello.lanes,
        })
    }

    /// The device process's lanes.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    fn send(&self, kind: u8, id: u64, payload: &[u8]) -> Result<()> {
        let mut input = lock(&self.input);
        let pipe = input
            .as_mut()
            .ok_or_else(|| pipe_error("closed", "the device was dropped"))?;
        write_frame(pipe, kind, id, payload).map_err(|e| {
            let gone = lock(&self.routes).gone.clone();
            pipe_error("cannot reach it", gone.unwrap_or_else(|| e.to_string()))
        })
    }
}

/// The host's reader: routes each frame to its graph's stream or stats request, until the
/// pipe ends; then every open stream gets an error (the process is gone).
fn read_replies(mut stdout: impl Read, routes: &Mutex<Routes>) {
    let why = loop {
        let (kind, id, payload) = match read_frame(&mut stdout) {
            Ok(Some(f)) => f,
            Ok(None) => break "the device process exited".to_string(),
            Err(e) => break format!("the pipe from the device process failed: {e}"),
        };
        let mut r = lock(routes);
        match kind {
            BATCH => {
                if let Some(tx) = r.graphs.get(&id) {
                    let _ = tx.send(decode_batch(&payload));
                }
            }
            ERROR => {
                let e = match serde_json::from_slice::<Failure>(&payload) {
                    Ok(Failure {
                        declined: true,
                        detail,
                    }) => Error::DeviceDeclined {
                        detail,
                        memory: false,
                    },
                    Ok(Failure { detail, .. }) => Error::Offload { detail },
                    Err(e) => pipe_error("an error that does not decode", e),
                };
                if let Some(tx) = r.graphs.get(&id) {
                    let _ = tx.send(Err(e));
                }
            }
            END => {
                r.graphs.remove(&id);
            }
            STATS_REPLY => {
                if let (Some(tx), Ok(stats)) =
                    (r.stats.remove(&id), serde_json::from_slice(&payload))
                {
                    let _ = tx.send(stats);
                }
            }
            other => break format!("the device process sent a frame of unknown kind {other}"),
        }
    };
    let mut r = lock(routes);
    for (_, tx) in r.graphs.drain() {
        let _ = tx.send(Err(Error::Offload {
            detail: format!("{why} before the graph's end"),
        }));
    }
    r.stats.clear();
    r.gone = Some(why);
}

impl Device for ProcessDevice {
    fn submit(&self, graph: &TaskGraph) -> Result<DeviceStream> {
        graph.check()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = channel();
        {
            let mut r = lock(&self.routes);
            if let Some(why) = &r.gone {
                return Err(pipe_error("cannot run the graph", why));
            }
            r.graphs.insert(id, tx);
        }
        if let Err(e) = self.send(SUBMIT, id, graph.to_json().as_bytes()) {
            lock(&self.routes).graphs.remove(&id);
            return Err(e);
        }
        let input = self.input.clone();
        let notify = move || {
            if let Some(pipe) = lock(&input).as_mut() {
                let _ = write_frame(pipe, CANCEL, id, &[]);
            }
        };
        Ok(DeviceStream::new(rx, Some(Box::new(notify))))
    }

    /// The device process's counters; zeros when it cannot answer.
    fn stats(&self) -> DeviceStats {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        {
            let mut r = lock(&self.routes);
            if r.gone.is_some() {
                return DeviceStats::default();
            }
            r.stats.insert(id, tx);
        }
        if self.send(STATS, id, &[]).is_err() {
            lock(&self.routes).stats.remove(&id);
            return DeviceStats::default();
        }
        rx.recv_timeout(WAIT).unwrap_or_default()
    }

    fn reset_stats(&self) {
        let _ = self.send(RESET, 0, &[]);
    }

    fn memory_budget(&self) -> u64 {
        self.memory_budget
    }

    fn in_host_process(&self) -> bool {
        false
    }
}

impl Drop for ProcessDevice {
    fn drop(&mut self) {
        // Closing the pipe ends the process's loop; it stops its graphs and exits.
        lock(&self.input).take();
        let mut child = lock(&self.child);
        let Some(child) = child.as_mut() else {
            return;
        };
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                _ => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
