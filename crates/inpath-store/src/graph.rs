//! Graphs in the store: a CSR (compressed sparse row) file laid out in pages, its writer, seeded
//! random graphs, and breadth-first search over a handle that holds one.
//!
//! # The CSR file
//!
//! A graph is an ordinary handle (raw or sealed pages) holding this file (all integers
//! little-endian; also in docs/FORMATS.md, "CSR graph"):
//!
//! ```text
//! offset        size     field
//!  0            8        magic "INPGRAPH"
//!  8            2        format version, u16: 1
//! 10            2        flags, u16: bit 0 = undirected (every edge u–v was written as u→v and
//!                        v→u; a self loop once); other bits zero
//! 12            4        page size P, u32: the store page size the file is laid out for
//!                        (a multiple of 8, 512 .. 16 MiB; must equal the handle's page size)
//! 16            8        vertex count n, u64 (at most 2^32 − 2: ids are u32, u32::MAX means none)
//! 24            8        edge count m, u64 (entries of the neighbour array)
//! 32            8        data pages T, u64 = ceil((64 + 8·(n+1) + 4·m) / P)
//! 40            20       reserved, zero
//! 60            4        CRC-32 (IEEE, as zlib's crc32) of bytes 0..60
//! 64            8·(n+1)  offsets: u64 per vertex and one more; the out-neighbours of v are
//!                        neighbours[offsets[v] .. offsets[v+1]]; offsets[0] = 0, never
//!                        decreasing, offsets[n] = m
//! 72+8n         4·m      neighbours: u32 vertex ids (< n), each vertex's sorted ascending
//!                        (duplicate edges kept)
//! …             …        zero padding up to T·P
//! T·P           4·T      page CRC table: CRC-32 of data page k (bytes k·P .. (k+1)·P), k < T
//! T·P+4T        4        CRC-32 of the page CRC table
//! ```
//!
//! The file size is `T·P + 4·T + 4`, which the reader checks against the handle's size. The
//! magic, the header CRC's place (bytes 60..64, covering 0..60) and the version's place stay the
//! same in every version, so a damaged header is told from a newer one.
//!
//! **Why this shape.** The arrays are the plain CSR of `scipy.sparse` (indptr, indices), so a
//! reader can take them as they are. The layout is per page because the store reads pages: the
//! page CRC table lets a kernel check exactly the pages it reads (a BFS from a vertex in a small
//! component reads a few pages of a large graph) and name the damaged page; raw pages have no
//! checksum of their own, and sealed pages (GCM) are authenticated by the seal record as well.
//! Offsets are 8 bytes so one graph may hold more than 2^32 edges; neighbours are 4 bytes since
//! the bytes read per edge are what a traversal costs. `P` is a multiple of 8, so no offset or
//! neighbour entry straddles two pages.
//!
//! # Breadth-first search
//!
//! [`CsrGraph::open`] reads the header, the page CRC table and the whole offsets array once
//! (checked: CRCs, `offsets[0] = 0`, never decreasing, `offsets[n] = m`; kept as u32 when `m`
//! fits, half the cache footprint). [`CsrGraph::bfs`] is level-synchronous and reads each
//! neighbour page at most once, when a list on it is first needed (checked against its CRC,
//! every id `< n`), so a search in a small component reads only that component's pages. The
//! visit order is the one `scipy.sparse.csgraph.breadth_first_order` gives for a directed
//! graph: FIFO, each vertex's neighbours in CSR order, a vertex's predecessor the first frontier
//! vertex that reaches it. Every way a level is expanded gives exactly that order, so the
//! order, the levels and the predecessors are the same for every thread count:
//!
//! - **Top-down, one thread:** the frontier in order, a visited bitmap, the offsets and list of
//!   a vertex a few places ahead loaded early so that their cache misses overlap.
//! - **Top-down, several threads** (a frontier of 1024 vertices or more): consecutive chunks of
//!   the frontier, taken by threads in turn. Phase 1 claims each newly found vertex with an
//!   atomic minimum of the frontier position that found it (a per-thread bitmap skips a
//!   thread's later finds, which cannot win); phase 2 keeps a vertex only in the chunk of its
//!   smallest claim, at its first occurrence. The chunks' lists concatenated in order are the
//!   serial FIFO order. The pages the frontier needs are read on all threads first.
//! - **Bottom-up** (graphs written undirected, a frontier of at least 1/32 of the vertices, and
//!   fewer edges in the lists of the unvisited vertices than in the frontier's): every
//!   unvisited vertex scans its own list (its in-neighbours, as the graph is symmetric) for the
//!   frontier vertex with the smallest position, which is its scipy predecessor; the vertices
//!   found are then sorted by (that position, id), which is the order the predecessor's sorted
//!   list names them in. Beamer's direction-optimising BFS, made exact. The scan is cut across
//!   threads. It relies on what the writer guarantees and the reader does not check (it would
//!   cost a pass over every list): that an undirected graph's lists are symmetric and every
//!   list is sorted. A file that breaks these still gets a breadth-first search of some graph,
//!   never a panic or a loop, but not necessarily scipy's order for the file as stored.
//!
//! Pages are read with `OpenHandle::read_page` on the search's own threads, so `threads`
//! counts every thread that works. The neighbour bytes live in an anonymous mapping advised for
//! huge pages: filling tens of MiB 4 KiB at a time costs a page fault each, a third of the
//! search on a virtual machine.
//!
//! ```
//! use inpath_store::{csr_bytes, CsrGraph, PutOptions, Store};
//! let dir = tempfile::tempdir()?;
//! let mut store = Store::create(dir.path())?;
//! // 0 → 1 → 2 and 0 → 3, laid out for the default 8 KiB pages.
//! let csr = csr_bytes(4, &[(0, 1), (1, 2), (0, 3)], false, 8192)?;
//! let entry = store.put_reader(&csr[..], "g", &PutOptions::default())?;
//! let graph = CsrGraph::open(&store.open_handle(entry.handle.into())?)?;
//! let bfs = graph.bfs(0, 2)?;
//! assert_eq!(bfs.order, [0, 1, 3, 2]);
//! assert_eq!(bfs.levels, [0, 1, 2, 1]);
//! assert_eq!(bfs.edges_traversed, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::catalog::{Tier, MAX_PAGE, MIN_PAGE};
use crate::error::{Result, StoreError};
use crate::store::OpenHandle;
use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier, OnceLock};

/// The CSR file's magic number.
pub const CSR_MAGIC: [u8; 8] = *b"INPGRAPH";
/// The newest CSR format version this build writes and reads.
pub const CSR_VERSION: u16 = 1;
/// Bytes of the CSR header.
pub const CSR_HEADER: u64 = 64;
/// Header flag: the graph was written undirected (both directions of every edge).
pub const FLAG_UNDIRECTED: u16 = 1;
/// The most vertices a graph may have (ids are u32; `u32::MAX` stands for "none").
pub const MAX_VERTICES: u64 = u32::MAX as u64 - 1;
/// The level of a vertex the search did not reach.
pub const UNREACHED: u32 = u32::MAX;
/// The predecessor of the source and of unreached vertices.
pub const NO_PREDECESSOR: u32 = u32::MAX;

const FORMAT: &str = "CSR graph";
const UNCLAIMED: u32 = u32::MAX;
/// Levels whose frontier has fewer vertices than this are expanded by one thread.
const PARALLEL_MIN_VERTICES: u64 = 1024;

/// The fields of a CSR header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsrHeader {
    /// Format version.
    pub version: u16,
    /// Written undirected (flag bit 0).
    pub undirected: bool,
    /// The page size the file is laid out for.
    pub page_size: u32,
    /// Vertex count n.
    pub vertices: u64,
    /// Edge count m (entries of the neighbour array).
    pub edges: u64,
    /// Data pages T.
    pub data_pages: u64,
}

/// Byte positions of a CSR file with `n` vertices, `m` edges and pages of `p` bytes:
/// (neighbours start, data end, data pages T, file size); `None` on overflow.
fn layout(n: u64, m: u64, p: u64) -> Option<(u64, u64, u64, u64)> {
    let nb = n.checked_add(1)?.checked_mul(8)?.checked_add(CSR_HEADER)?;
    let end = m.checked_mul(4)?.checked_add(nb)?;
    let t = end.div_ceil(p);
    let size = t
        .checked_mul(p)?
        .checked_add(t.checked_mul(4)?)?
        .checked_add(4)?;
    Some((nb, end, t, size))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// Checks a page size for a file laid out in pages: a multiple of 8 in the store's range.
pub(crate) fn check_page_size(page_size: u32) -> Result<()> {
    if !(MIN_PAGE..=MAX_PAGE).contains(&page_size) || !page_size.is_multiple_of(8) {
        return Err(StoreError::parameter(
            "page size",
            page_size,
            &format!("a multiple of 8 from {MIN_PAGE} to {MAX_PAGE} bytes"),
        ));
    }
    Ok(())
}

/// Writes the CSR file of a graph with `vertices` vertices and the directed `edges` (`u → v`;
/// with `undirected`, also `v → u` for every `u ≠ v`), laid out for pages of `page_size` bytes.
/// Each vertex's neighbours are sorted ascending; duplicate edges are kept.
pub fn csr_bytes(
    vertices: u64,
    edges: &[(u32, u32)],
    undirected: bool,
    page_size: u32,
) -> Result<Vec<u8>> {
    check_page_size(page_size)?;
    if vertices > MAX_VERTICES {
        return Err(StoreError::parameter(
            "vertices",
            vertices,
            &format!("at most {MAX_VERTICES}"),
        ));
    }
    let n = vertices as usize;
    let mut degree = vec![0u64; n + 1];
    for &(u, v) in edges {
        if u as u64 >= vertices || v as u64 >= vertices {
            return Err(StoreError::parameter(
                "edge",
                format!("{u} {v}"),
                &format!("vertex ids below the vertex count {vertices}"),
            ));
        }
        degree[u as usize] += 1;
        if undirected && u != v {
            degree[v as usize] += 1;
        }
    }
    // Exclusive prefix sums: offsets.
    let mut offsets = Vec::with_capacity(n + 1);
    let mut total = 0u64;
    for d in &degree {
        offsets.push(total);
        total += d;
    }
    drop(degree);
    let m = total;
    let (nb_start, data_end, t, size) = layout(vertices, m, page_size as u64)
        .ok_or_else(|| StoreError::parameter("edges", m, "few enough for a file of 2^64 bytes"))?;
    let mut neighbours = vec![0u32; m as usize];
    let mut cursor = offsets.clone();
    for &(u, v) in edges {
        neighbours[cursor[u as usize] as usize] = v;
        cursor[u as usize] += 1;
        if undirected && u != v {
            neighbours[cursor[v as usize] as usize] = u;
            cursor[v as usize] += 1;
        }
    }
    drop(cursor);
    for v in 0..n {
        neighbours[offsets[v] as usize..offsets[v + 1] as usize].sort_unstable();
    }

    let mut out = Vec::with_capacity(size as usize);
    out.extend_from_slice(&CSR_MAGIC);
    out.extend_from_slice(&CSR_VERSION.to_le_bytes());
    let flags = if undirected { FLAG_UNDIRECTED } else { 0 };
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&page_size.to_le_bytes());
    out.extend_from_slice(&vertices.to_le_bytes());
    out.extend_from_slice(&m.to_le_bytes());
    out.extend_from_slice(&t.to_le_bytes());
    out.extend_from_slice(&[0u8; 20]);
    let crc = crc32fast::hash(&out[..60]);
    out.extend_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(out.len() as u64, CSR_HEADER);
    for o in &offsets {
        out.extend_from_slice(&o.to_le_bytes());
    }
    debug_assert_eq!(out.len() as u64, nb_start);
    for v in &neighbours {
        out.extend_from_slice(&v.to_le_bytes());
    }
    debug_assert_eq!(out.len() as u64, data_end);
    out.resize((t * page_size as u64) as usize, 0);
    let table: Vec<u8> = out
        .chunks_exact(page_size as usize)
        .flat_map(|page| crc32fast::hash(page).to_le_bytes())
        .collect();
    out.extend_from_slice(&table);
    out.extend_from_slice(&crc32fast::hash(&table).to_le_bytes());
    debug_assert_eq!(out.len() as u64, size);
    Ok(out)
}

/// Reads an edge list: one edge `U V` per line (two decimal vertex ids separated by spaces,
/// tabs or a comma); blank lines and lines starting with `#` or `%` are skipped. Returns the
/// edges and one more than the largest id (the vertex count the ids need). `path` names the
/// input in errors.
pub fn read_edge_list(mut reader: impl BufRead, path: &Path) -> Result<(Vec<(u32, u32)>, u64)> {
    let mut edges = Vec::new();
    let mut need = 0u64;
    let mut line = Vec::new();
    let mut number = 0u64;
    let bad = |line: u64, detail: String| StoreError::EdgeList {
        path: path.to_path_buf(),
        line,
        detail,
    };
    loop {
        line.clear();
        let got = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| StoreError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        if got == 0 {
            break;
        }
        number += 1;
        let text = line.trim_ascii();
        if text.is_empty() || text[0] == b'#' || text[0] == b'%' {
            continue;
        }
        let mut fields = text
            .split(|&b| b == b' ' || b == b'\t' || b == b',' || b == b'\r')
            .filter(|f| !f.is_empty());
        let mut ids = [0u32; 2];
        let mut count = 0;
        for field in fields.by_ref().take(3) {
            if count == 2 {
                count = 3;
                break;
            }
            let id = parse_id(field).ok_or_else(|| {
                bad(
                    number,
                    format!(
                        "{:?} is not a vertex id (a decimal number up to {})",
                        String::from_utf8_lossy(field),
                        MAX_VERTICES - 1
                    ),
                )
            })?;
            ids[count] = id;
            count += 1;
        }
        if count != 2 {
            return Err(bad(
                number,
                "expected an edge: two vertex ids, as `U V`".to_string(),
            ));
        }
        need = need.max(ids[0].max(ids[1]) as u64 + 1);
        edges.push((ids[0], ids[1]));
    }
    Ok((edges, need))
}

fn parse_id(field: &[u8]) -> Option<u32> {
    if field.is_empty() || field.len() > 10 || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = field
        .iter()
        .fold(0u64, |acc, &d| acc * 10 + (d - b'0') as u64);
    (v < MAX_VERTICES).then_some(v as u32)
}

/// The shape of a random graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphKind {
    /// Both ends of every edge uniform over the vertices (Erdős–Rényi G(n, m) with repeats).
    Uniform,
    /// R-MAT (Graph500's parameters a = 0.57, b = c = 0.19): a skewed, power-law-like degree
    /// distribution; vertex ids shuffled so that high degrees are not clustered at low ids.
    Rmat,
}

impl GraphKind {
    /// Parses `uniform` or `rmat`.
    pub fn parse(text: &str) -> Result<GraphKind> {
        match text {
            "uniform" => Ok(GraphKind::Uniform),
            "rmat" => Ok(GraphKind::Rmat),
            _ => Err(StoreError::parameter("graph kind", text, "uniform or rmat")),
        }
    }

    /// The name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            GraphKind::Uniform => "uniform",
            GraphKind::Rmat => "rmat",
        }
    }
}

/// splitmix64: the seeded generator of the random graphs and chase files.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` ≥ 1), by multiply-shift.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// The most edges a random graph may have.
pub const MAX_RANDOM_EDGES: u64 = 1 << 31;

/// `edges` random directed edges over `vertices` vertices, the same for the same seed.
pub fn random_edges(
    kind: GraphKind,
    vertices: u64,
    edges: u64,
    seed: u64,
) -> Result<Vec<(u32, u32)>> {
    if vertices == 0 || vertices > MAX_VERTICES {
        return Err(StoreError::parameter(
            "vertices",
            vertices,
            &format!("1 to {MAX_VERTICES}"),
        ));
    }
    if edges > MAX_RANDOM_EDGES {
        return Err(StoreError::parameter(
            "edges",
            edges,
            &format!("at most {MAX_RANDOM_EDGES}"),
        ));
    }
    let mut rng = SplitMix(seed ^ 0x6772_6170_6873_2131);
    let mut out = Vec::with_capacity(edges as usize);
    match kind {
        GraphKind::Uniform => {
            for _ in 0..edges {
                let u = rng.below(vertices) as u32;
                let v = rng.below(vertices) as u32;
                out.push((u, v));
            }
        }
        GraphKind::Rmat => {
            let scale = 64 - (vertices - 1).leading_zeros();
            // Quadrant thresholds out of 2^16: a, a + b, a + b + c.
            const A: u64 = 37_356; // 0.57
            const AB: u64 = 49_807; // 0.76
            const ABC: u64 = 62_259; // 0.95
            let mut perm: Vec<u32> = (0..vertices as u32).collect();
            for i in (1..perm.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                perm.swap(i, j);
            }
            for _ in 0..edges {
                let (u, v) = loop {
                    let (mut u, mut v) = (0u64, 0u64);
                    let mut bits = 0u64;
                    for level in 0..scale {
                        if level % 4 == 0 {
                            bits = rng.next();
                        }
                        let r = bits & 0xFFFF;
                        bits >>= 16;
                        let (du, dv) = if r < A {
                            (0, 0)
                        } else if r < AB {
                            (0, 1)
                        } else if r < ABC {
                            (1, 0)
                        } else {
                            (1, 1)
                        };
                        u = u << 1 | du;
                        v = v << 1 | dv;
                    }
                    if u < vertices && v < vertices {
                        break (u, v);
                    }
                };
                out.push((perm[u as usize], perm[v as usize]));
            }
        }
    }
    Ok(out)
}

/// A CSR graph opened on a handle: its header, page CRCs and offsets array in memory, the
/// neighbour pages read as a search needs them.
#[derive(Debug)]
pub struct CsrGraph {
    handle: Arc<OpenHandle>,
    header: CsrHeader,
    offsets: Offsets,
    page_crcs: Vec<u32>,
    pages_read: u64,
}

/// The result of a breadth-first search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bfs {
    /// The source vertex.
    pub source: u32,
    /// The vertices reached, in visit order (the source first).
    pub order: Vec<u32>,
    /// The level (hops from the source) of every vertex, [`UNREACHED`] for those not reached.
    pub levels: Vec<u32>,
    /// The predecessor of every vertex in the search tree, [`NO_PREDECESSOR`] for the source
    /// and the vertices not reached.
    pub predecessors: Vec<u32>,
    /// The number of vertices at each level (level 0 is the source).
    pub level_sizes: Vec<u64>,
    /// Edges traversed: the sum of the out-degrees of the vertices reached.
    pub edges_traversed: u64,
    /// Neighbour pages the search read (each once).
    pub pages_read: u64,
}

impl Bfs {
    /// Vertices reached, the source included.
    pub fn reached(&self) -> u64 {
        self.order.len() as u64
    }
}

impl CsrGraph {
    /// Opens the CSR graph in `handle`: reads and checks the header, the page CRC table and the
    /// offsets array.
    pub fn open(handle: &Arc<OpenHandle>) -> Result<CsrGraph> {
        let entry = handle.entry();
        let id = entry.handle;
        let corrupt = |page: u64, detail: String| StoreError::Corrupt {
            handle: id,
            format: FORMAT,
            page,
            detail,
        };
        if entry.size < CSR_HEADER {
            return Err(StoreError::NotFormat {
                handle: id,
                format: FORMAT,
                detail: format!(
                    "it is {} bytes, shorter than the {CSR_HEADER}-byte header",
                    entry.size
                ),
            });
        }
        let mut page0 = Vec::new();
        handle.read_page(0, &mut page0)?;
        let head = &page0[..CSR_HEADER as usize];
        if head[..8] != CSR_MAGIC {
            return Err(StoreError::NotFormat {
                handle: id,
                format: FORMAT,
                detail: format!(
                    "it starts with {:?}, not the magic \"INPGRAPH\"",
                    String::from_utf8_lossy(&head[..8])
                ),
            });
        }
        let (stored, computed) = (le32(head, 60), crc32fast::hash(&head[..60]));
        if stored != computed {
            return Err(corrupt(
                0,
                format!(
                    "the header fails its CRC-32 (stored {stored:08x}, computed {computed:08x})"
                ),
            ));
        }
        let version = le16(head, 8);
        if version > CSR_VERSION {
            return Err(StoreError::FormatVersion {
                handle: id,
                format: FORMAT,
                version,
                newest: CSR_VERSION,
            });
        }
        if version == 0 {
            return Err(corrupt(0, "format version 0".to_string()));
        }
        let flags = le16(head, 10);
        if flags & !FLAG_UNDIRECTED != 0 {
            return Err(corrupt(0, format!("unknown flags {flags:#06x}")));
        }
        if head[40..60].iter().any(|&b| b != 0) {
            return Err(corrupt(0, "reserved header bytes are not zero".to_string()));
        }
        let page_size = le32(head, 12);
        if page_size != entry.page_size {
            return Err(StoreError::PageSizeMismatch {
                handle: id,
                format: FORMAT,
                written: page_size as u64,
                stored: entry.page_size as u64,
            });
        }
        if !page_size.is_multiple_of(8) {
            return Err(corrupt(
                0,
                format!("page size {page_size} is not a multiple of 8"),
            ));
        }
        let p = page_size as u64;
        let (n, m, t) = (le64(head, 16), le64(head, 24), le64(head, 32));
        if n > MAX_VERTICES {
            return Err(corrupt(
                0,
                format!("vertex count {n} is above the limit {MAX_VERTICES}"),
            ));
        }
        let Some((nb_start, _, want_t, size)) = layout(n, m, p) else {
            return Err(corrupt(
                0,
                format!("{n} vertices and {m} edges overflow a file"),
            ));
        };
        if t != want_t {
            return Err(corrupt(
                0,
                format!("{t} data pages in the header, {n} vertices and {m} edges need {want_t}"),
            ));
        }
        if size != entry.size {
            return Err(corrupt(
                0,
                format!(
                    "the header describes a file of {size} bytes, the handle holds {} (a \
                     truncated or extended file)",
                    entry.size
                ),
            ));
        }
        let header = CsrHeader {
            version,
            undirected: flags & FLAG_UNDIRECTED != 0,
            page_size,
            vertices: n,
            edges: m,
            data_pages: t,
        };

        // The page CRC table and its own CRC.
        let table = handle.read(t * p, 4 * t + 4)?;
        let (stored, computed) = (
            le32(&table, 4 * t as usize),
            crc32fast::hash(&table[..4 * t as usize]),
        );
        if stored != computed {
            return Err(corrupt(
                t,
                format!(
                    "the page CRC table (bytes {}..{size}) fails its CRC-32 (stored {stored:08x}, \
                     computed {computed:08x})",
                    t * p
                ),
            ));
        }
        let page_crcs: Vec<u32> = table[..4 * t as usize]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let mut graph = CsrGraph {
            handle: Arc::clone(handle),
            header,
            offsets: Offsets::Wide(Vec::new()),
            page_crcs,
            pages_read: 1,
        };
        graph.check_page(0, &page0)?;

        // The offsets array, page by page.
        let mut offsets = Vec::with_capacity(n as usize + 1);
        let last_page = (nb_start - 1) / p;
        let mut buf = page0;
        for page in 0..=last_page {
            if page > 0 {
                handle.read_page(page, &mut buf)?;
                graph.check_page(page, &buf)?;
                graph.pages_read += 1;
            }
            let lo = (page * p).max(CSR_HEADER);
            let hi = ((page + 1) * p).min(nb_start);
            let bytes = &buf[(lo - page * p) as usize..(hi - page * p) as usize];
            offsets.extend(
                bytes
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
            );
        }
        let page_of = |i: usize| (CSR_HEADER + 8 * i as u64) / p;
        if offsets[0] != 0 {
            return Err(corrupt(0, format!("offsets[0] is {}, not 0", offsets[0])));
        }
        if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
            return Err(corrupt(
                page_of(i + 1),
                format!(
                    "offsets decrease at vertex {i}: offsets[{i}] = {}, offsets[{}] = {}",
                    offsets[i],
                    i + 1,
                    offsets[i + 1]
                ),
            ));
        }
        if offsets[n as usize] != m {
            return Err(corrupt(
                page_of(n as usize),
                format!(
                    "offsets[n] = {} but the edge count is {m}",
                    offsets[n as usize]
                ),
            ));
        }
        graph.offsets = match offsets.iter().map(|&o| u32::try_from(o)).collect() {
            Ok(narrow) => Offsets::Narrow(narrow),
            Err(_) => Offsets::Wide(offsets),
        };
        Ok(graph)
    }

    /// The header.
    pub fn header(&self) -> &CsrHeader {
        &self.header
    }

    /// Vertex count n.
    pub fn vertices(&self) -> u64 {
        self.header.vertices
    }

    /// Edge count m.
    pub fn edges(&self) -> u64 {
        self.header.edges
    }

    /// The out-degree of vertex `v` (`v` < n).
    pub fn degree(&self, v: u32) -> u64 {
        let v = v as usize;
        match &self.offsets {
            Offsets::Narrow(o) => (o[v + 1] - o[v]) as u64,
            Offsets::Wide(o) => o[v + 1] - o[v],
        }
    }

    /// The vertex whose neighbour list holds entry `entry` (< m).
    fn vertex_of_entry(&self, entry: u64) -> usize {
        match &self.offsets {
            Offsets::Narrow(o) => o.partition_point(|&x| x as u64 <= entry) - 1,
            Offsets::Wide(o) => o.partition_point(|&x| x <= entry) - 1,
        }
    }

    /// Pages read by [`CsrGraph::open`] (the header, the offsets array; not the CRC table).
    pub fn pages_read(&self) -> u64 {
        self.pages_read
    }

    fn corrupt(&self, page: u64, detail: String) -> StoreError {
        StoreError::Corrupt {
            handle: self.handle.entry().handle,
            format: FORMAT,
            page,
            detail,
        }
    }

    fn check_page(&self, page: u64, bytes: &[u8]) -> Result<()> {
        let stored = self.page_crcs[page as usize];
        let computed = crc32fast::hash(bytes);
        if stored != computed {
            return Err(self.corrupt(
                page,
                format!("the page fails its CRC-32 (stored {stored:08x}, computed {computed:08x})"),
            ));
        }
        Ok(())
    }

    fn neighbours_start(&self) -> u64 {
        CSR_HEADER + 8 * (self.header.vertices + 1)
    }

    /// The neighbour array in place in the mapped data file, when the handle is raw and the
    /// pages holding it are stored back to back in order (as `put` writes them).
    fn neighbours_in_file(&self) -> Option<&[u8]> {
        let entry = self.handle.entry();
        if entry.tier != Tier::Raw || self.header.edges == 0 {
            return None;
        }
        let first = self.page_of_entry(0);
        let last = self.page_of_entry(self.header.edges - 1);
        let ps = self.header.page_size as u64;
        let ex = &entry.extents;
        let base = ex.get(first as usize)?.offset;
        for p in first..=last {
            let e = ex.get(p as usize)?;
            if e.offset != base + (p - first) * ps || e.len as u64 != entry.page_len(p) {
                return None;
            }
        }
        let at = base + (self.neighbours_start() - first * ps);
        let len = 4 * self.header.edges;
        self.handle
            .mapping()?
            .bytes()
            .get(at as usize..(at + len) as usize)
    }

    /// The page holding neighbour entry `i` (a shift when the page size is a power of two).
    fn page_of_entry(&self, i: u64) -> u64 {
        let byte = self.neighbours_start() + 4 * i;
        let p = self.header.page_size;
        if p.is_power_of_two() {
            byte >> p.trailing_zeros()
        } else {
            byte / p as u64
        }
    }

    /// The neighbour entries page `page` holds.
    fn entries_of_page(&self, page: u64) -> std::ops::Range<u64> {
        let p = self.header.page_size as u64;
        let nb = self.neighbours_start();
        let end = nb + 4 * self.header.edges;
        let lo = (page * p).clamp(nb, end);
        let hi = ((page + 1) * p).clamp(nb, end);
        (lo - nb) / 4..(hi - nb) / 4
    }

    /// Reads neighbour page `page` into `dst` (the bytes of its entries), checking its CRC and
    /// every id.
    fn load_page(&self, page: u64, dst: Option<&mut [u8]>, buf: &mut PageBuf) -> Result<()> {
        // From the mapped file where it can be mapped (no system call, no allocation per
        // page: a search reads thousands of pages), else through `read_page`.
        if self.handle.mapping().is_none() {
            self.handle.read_page(page, &mut buf.plain)?;
            return self.take_page(page, &buf.plain, dst);
        }
        self.handle
            .with_mapped_page(page, &mut buf.run, |bytes| self.take_page(page, bytes, dst))?
            .unwrap_or_else(|| Err(self.corrupt(page, "the data file is not mapped".into())))
    }

    /// Checks page `page` (its CRC, then every id) and copies its neighbour entries to `dst`
    /// (`None`: the search reads them in place, from the mapped file).
    fn take_page(&self, page: u64, buf: &[u8], dst: Option<&mut [u8]>) -> Result<()> {
        self.check_page(page, buf)?;
        let p = self.header.page_size as u64;
        let range = self.entries_of_page(page);
        let lo = (self.neighbours_start() + 4 * range.start - page * p) as usize;
        let src = &buf[lo..lo + 4 * (range.end - range.start) as usize];
        if let Some(dst) = dst {
            dst.copy_from_slice(src);
        }
        let n = self.header.vertices;
        let ids = || {
            src.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        };
        if ids().fold(0u32, u32::max) as u64 >= n {
            let (at, id) = ids()
                .enumerate()
                .find(|&(_, v)| v as u64 >= n)
                .expect("an id out of range");
            let entry = range.start + at as u64;
            let vertex = self.vertex_of_entry(entry);
            return Err(self.corrupt(
                page,
                format!(
                    "neighbour entry {entry} (of vertex {vertex}) is {id}, not below the vertex \
                     count {n}"
                ),
            ));
        }
        Ok(())
    }

    /// The out-neighbours of each vertex of `vertices`, back to back, and how many each has:
    /// one hop of a search that runs elsewhere (a BFS across machines expands its frontier
    /// where each shard of the graph lives). Pages are read and checked as for a search.
    pub fn neighbours_of(&self, vertices: &[u64]) -> Result<(Vec<u32>, Vec<u64>)> {
        let n = self.header.vertices;
        if let Some(&bad) = vertices.iter().find(|&&v| v >= n) {
            return Err(StoreError::parameter(
                "vertex",
                bad,
                &format!("a vertex id below the vertex count {n}"),
            ));
        }
        let range = |v: usize| match &self.offsets {
            Offsets::Narrow(o) => (o[v] as u64, o[v + 1] as u64),
            Offsets::Wide(o) => (o[v], o[v + 1]),
        };
        let mut targets = Vec::new();
        let mut counts = Vec::with_capacity(vertices.len());
        let mut buf = PageBuf::default();
        let mut page_entries: Vec<u8> = Vec::new();
        let mut current = u64::MAX;
        for &v in vertices {
            let (a, b) = range(v as usize);
            counts.push(b - a);
            if a == b {
                continue;
            }
            for page in self.page_of_entry(a)..=self.page_of_entry(b - 1) {
                let r = self.entries_of_page(page);
                if page != current {
                    page_entries.resize(4 * (r.end - r.start) as usize, 0);
                    self.load_page(page, Some(&mut page_entries), &mut buf)?;
                    current = page;
                }
                let (lo, hi) = (a.max(r.start) - r.start, b.min(r.end) - r.start);
                targets.extend(
                    page_entries[4 * lo as usize..4 * hi as usize]
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
        }
        self.handle.check_mapping()?;
        Ok((targets, counts))
    }

    /// Breadth-first search from `source` with `threads` threads (see the [module docs](self)).
    /// The result is the same for every thread count.
    pub fn bfs(&self, source: u64, threads: usize) -> Result<Bfs> {
        self.bfs_with(source, threads, PARALLEL_MIN_VERTICES)
    }

    /// [`CsrGraph::bfs`] with the level size from which a level is expanded on several threads:
    /// levels whose frontier has fewer than `parallel_min_vertices` vertices are expanded by one
    /// thread, as starting threads would cost more (`bfs` uses 1024; the tests use 0 to run the
    /// parallel path on every level).
    pub fn bfs_with(&self, source: u64, threads: usize, parallel_min_vertices: u64) -> Result<Bfs> {
        let n = self.header.vertices;
        if source >= n {
            return Err(StoreError::parameter(
                "source",
                source,
                &format!("a vertex id below the vertex count {n}"),
            ));
        }
        match &self.offsets {
            Offsets::Narrow(off) => self.search(off, source as u32, threads, parallel_min_vertices),
            Offsets::Wide(off) => self.search(off, source as u32, threads, parallel_min_vertices),
        }
    }

    fn search<O: Offset>(
        &self,
        off: &[O],
        source: u32,
        threads: usize,
        parallel_min_vertices: u64,
    ) -> Result<Bfs> {
        let threads = threads.max(1);
        let n = self.header.vertices as usize;
        let mut pages = Pages {
            neighbours: match self.neighbours_in_file() {
                Some(bytes) => NeighbourBytes::InFile(bytes),
                None => NeighbourBytes::new(4 * self.header.edges as usize)?,
            },
            loaded: vec![false; self.header.data_pages as usize],
            left: if self.header.edges == 0 {
                0
            } else {
                self.page_of_entry(self.header.edges - 1) - self.page_of_entry(0) + 1
            },
            read: 0,
            buf: PageBuf::default(),
        };
        let visited: Vec<AtomicU64> = (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        let levels: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(UNREACHED)).collect();
        let preds: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(NO_PREDECESSOR)).collect();
        let claims: Vec<AtomicU32> = if threads > 1 {
            (0..n).map(|_| AtomicU32::new(UNCLAIMED)).collect()
        } else {
            Vec::new()
        };
        let mut seen: Vec<Vec<u64>> = if threads > 1 {
            (0..threads).map(|_| vec![0u64; n.div_ceil(64)]).collect()
        } else {
            Vec::new()
        };
        let mut order: Vec<u32> = Vec::with_capacity(n);
        order.push(source);
        visited[source as usize / 64].store(1 << (source % 64), Relaxed);
        levels[source as usize].store(0, Relaxed);
        let mut level_sizes = vec![1u64];
        let mut edges_traversed = 0u64;
        let mut need = Vec::new();
        let mut sink = 0u64;
        let mut lo = 0usize;
        let mut level = 0u32;
        // Frontier positions for bottom-up levels (allocated at the first one).
        let mut fpos: Vec<u32> = Vec::new();
        let mut fbits: Vec<u64> = Vec::new();
        let degree = |u: u32| off[u as usize + 1].get() - off[u as usize].get();
        while lo < order.len() {
            let hi = order.len();
            let next_level = level + 1;
            // Bottom-up (undirected graphs, a large frontier): when the lists of the vertices
            // not visited yet hold fewer edges than the frontier's, scan those instead.
            let mut frontier_edges = None;
            if self.header.undirected && (hi - lo) as u64 * BOTTOM_UP_FRONTIER >= n as u64 {
                let mf: u64 = order[lo..hi].iter().map(|&u| degree(u)).sum();
                frontier_edges = Some(mf);
            }
            let bottom_up =
                frontier_edges.is_some_and(|mf| self.header.edges - edges_traversed - mf < mf);
            if bottom_up {
                edges_traversed += frontier_edges.unwrap_or(0);
                if pages.left > 0 {
                    // Every list not scanned yet may be needed: read all pages left.
                    need.clear();
                    let last = self.page_of_entry(self.header.edges - 1);
                    for page in self.page_of_entry(0)..=last {
                        if !pages.loaded[page as usize] {
                            pages.loaded[page as usize] = true;
                            need.push(page);
                        }
                    }
                    pages.left -= need.len() as u64;
                    pages.read += need.len() as u64;
                    self.load_pages(&need, pages.neighbours.bytes_mut(), threads)?;
                }
                if fpos.is_empty() {
                    fpos = vec![u32::MAX; n];
                    fbits = vec![0u64; n.div_ceil(64)];
                }
                for (i, &u) in order.iter().enumerate().take(hi).skip(lo) {
                    fpos[u as usize] = i as u32;
                    fbits[u as usize / 64] |= 1 << (u % 64);
                }
                let found = bottom_up_level(
                    off,
                    pages.neighbours.bytes(),
                    &visited,
                    (&fbits, &fpos),
                    lo as u32,
                    threads,
                );
                for &u in &order[lo..hi] {
                    fbits[u as usize / 64] = 0;
                }
                // The FIFO order: by the predecessor's position, then by id (each list is
                // sorted, so that is the order the predecessor's list names them in). `found`
                // comes in id order, so a stable counting sort by position gives both.
                let found = by_position(&found, lo as u32, hi as u32);
                for (p, w) in found {
                    let word = &visited[w as usize / 64];
                    word.store(word.load(Relaxed) | 1 << (w % 64), Relaxed);
                    levels[w as usize].store(next_level, Relaxed);
                    preds[w as usize].store(order[p as usize], Relaxed);
                    order.push(w);
                }
            } else if threads > 1 && (hi - lo) as u64 >= parallel_min_vertices {
                // The pages the frontier's lists lie on that are not read yet, read on all
                // threads first.
                if pages.left > 0 {
                    need.clear();
                    for &u in &order[lo..hi] {
                        let (a, b) = (off[u as usize].get(), off[u as usize + 1].get());
                        if a < b {
                            for page in self.page_of_entry(a)..=self.page_of_entry(b - 1) {
                                if !pages.loaded[page as usize] {
                                    pages.loaded[page as usize] = true;
                                    need.push(page);
                                }
                            }
                        }
                    }
                    need.sort_unstable();
                    pages.left -= need.len() as u64;
                    pages.read += need.len() as u64;
                    self.load_pages(&need, pages.neighbours.bytes_mut(), threads)?;
                }
                let (found, edges) = expand_parallel(
                    &Expand {
                        off,
                        nbrs: pages.neighbours.bytes(),
                        visited: &visited,
                        levels: &levels,
                        preds: &preds,
                        claims: &claims,
                        level: next_level,
                    },
                    &order,
                    lo..hi,
                    &mut seen,
                );
                edges_traversed += edges;
                for part in found {
                    order.extend_from_slice(&part);
                }
            } else {
                // One thread, FIFO; each list's pages are read when first needed. The loads of
                // a vertex LOOK_OFFSETS ahead (its offsets) and LOOK_LIST ahead (its list's
                // start) are issued early so that their cache misses overlap this vertex's work.
                for i in lo..hi {
                    if let Some(&v) = order.get(i + LOOK_OFFSETS) {
                        sink ^= off[v as usize].get();
                    }
                    if let Some(&v) = order.get(i + LOOK_LIST) {
                        // Only a list already read: touching an untouched page of the buffer
                        // would map it read-only first and fault again on the write.
                        let a = off[v as usize].get();
                        let page = self.page_of_entry(a) as usize;
                        if pages.left == 0 || pages.loaded.get(page) == Some(&true) {
                            let at = 4 * a as usize;
                            sink ^= pages.neighbours.bytes().get(at).copied().unwrap_or(0) as u64;
                        }
                    }
                    let u = order[i];
                    let (a, b) = (off[u as usize].get(), off[u as usize + 1].get());
                    if a == b {
                        continue;
                    }
                    edges_traversed += b - a;
                    if pages.left > 0 {
                        self.ensure(&mut pages, a, b)?;
                    }
                    let list = &pages.neighbours.bytes()[4 * a as usize..4 * b as usize];
                    for c in list.chunks_exact(4) {
                        let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        let word = &visited[w as usize / 64];
                        let bit = 1u64 << (w % 64);
                        let seen = word.load(Relaxed);
                        if seen & bit == 0 {
                            word.store(seen | bit, Relaxed);
                            levels[w as usize].store(next_level, Relaxed);
                            preds[w as usize].store(u, Relaxed);
                            order.push(w);
                        }
                    }
                }
            }
            if order.len() > hi {
                level_sizes.push((order.len() - hi) as u64);
            }
            lo = hi;
            level = next_level;
        }
        std::hint::black_box(sink);
        self.handle.check_mapping()?;
        Ok(Bfs {
            source,
            order,
            levels: levels.into_iter().map(AtomicU32::into_inner).collect(),
            predecessors: preds.into_iter().map(AtomicU32::into_inner).collect(),
            level_sizes,
            edges_traversed,
            pages_read: pages.read,
        })
    }

    /// Reads the pages of neighbour entries `a..b` that are not read yet.
    fn ensure(&self, pages: &mut Pages, a: u64, b: u64) -> Result<()> {
        for page in self.page_of_entry(a)..=self.page_of_entry(b - 1) {
            if !pages.loaded[page as usize] {
                let r = self.entries_of_page(page);
                let dst = pages
                    .neighbours
                    .bytes_mut()
                    .map(|b| &mut b[4 * r.start as usize..4 * r.end as usize]);
                self.load_page(page, dst, &mut pages.buf)?;
                pages.loaded[page as usize] = true;
                pages.left -= 1;
                pages.read += 1;
            }
        }
        Ok(())
    }

    /// Reads the neighbour pages `pages` (sorted, distinct) into `neighbours`, on up to
    /// `threads` threads.
    fn load_pages(
        &self,
        pages: &[u64],
        neighbours: Option<&mut [u8]>,
        threads: usize,
    ) -> Result<()> {
        // Cut `neighbours` into the disjoint slices of the pages, in page order (none when the
        // pages are only checked, the array being read in place).
        let mut parts: Vec<(u64, Option<&mut [u8]>)> = Vec::with_capacity(pages.len());
        match neighbours {
            Some(neighbours) => {
                let mut rest = neighbours;
                let mut at = 0u64;
                for &page in pages {
                    let r = self.entries_of_page(page);
                    let tail = std::mem::take(&mut rest);
                    let (_, tail) = tail.split_at_mut(4 * (r.start - at) as usize);
                    let (mine, tail) = tail.split_at_mut(4 * (r.end - r.start) as usize);
                    parts.push((page, Some(mine)));
                    rest = tail;
                    at = r.end;
                }
            }
            None => parts.extend(pages.iter().map(|&p| (p, None))),
        }
        let work = |parts: &mut [(u64, Option<&mut [u8]>)]| -> Result<()> {
            let mut buf = PageBuf::default();
            for (page, dst) in parts.iter_mut() {
                self.load_page(*page, dst.as_deref_mut(), &mut buf)?;
            }
            Ok(())
        };
        if threads == 1 || parts.len() < 8 {
            return work(&mut parts);
        }
        let per = parts.len().div_ceil(threads);
        std::thread::scope(|s| {
            let tasks: Vec<_> = parts
                .chunks_mut(per)
                .map(|chunk| s.spawn(move || work(chunk)))
                .collect();
            tasks
                .into_iter()
                .map(|t| t.join().expect("a page loader panicked"))
                .collect::<Result<Vec<()>>>()
        })?;
        Ok(())
    }
}

/// A level goes bottom-up only when its frontier holds at least 1/this of the vertices (the
/// edge counts, which decide, cost a pass over the frontier to learn).
const BOTTOM_UP_FRONTIER: u64 = 32;

/// One bottom-up level: every vertex not visited yet whose list names a frontier vertex (its
/// bit set in `frontier.0`, its position in the visit order in `frontier.1`) is found, with the
/// smallest such position: `(position, vertex)` pairs, in no particular order. The bitmap is
/// small enough to stay in cache; positions are looked up for frontier vertices only.
fn bottom_up_level<O: Offset>(
    off: &[O],
    nbrs: &[u8],
    visited: &[AtomicU64],
    frontier: (&[u64], &[u32]),
    lo: u32,
    threads: usize,
) -> Vec<(u32, u32)> {
    let (fbits, fpos) = frontier;
    let n = fpos.len();
    let words = visited.len();
    let scan = |range: std::ops::Range<usize>| {
        let mut found = Vec::new();
        for wi in range {
            let mut free = !visited[wi].load(Relaxed);
            if wi == words - 1 && !n.is_multiple_of(64) {
                free &= (1u64 << (n % 64)) - 1;
            }
            while free != 0 {
                let w = wi * 64 + free.trailing_zeros() as usize;
                free &= free - 1;
                let (a, b) = (off[w].get() as usize, off[w + 1].get() as usize);
                let mut best = u32::MAX;
                for c in nbrs[4 * a..4 * b].chunks_exact(4) {
                    let u = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize;
                    if fbits[u / 64] & (1 << (u % 64)) == 0 {
                        continue;
                    }
                    let p = fpos[u];
                    if p < best {
                        best = p;
                        if p == lo {
                            break;
                        }
                    }
                }
                if best != u32::MAX {
                    found.push((best, w as u32));
                }
            }
        }
        found
    };
    if threads == 1 {
        return scan(0..words);
    }
    let per = words.div_ceil(threads * 4).max(1);
    let next = AtomicUsize::new(0);
    let mut parts: Vec<(usize, Vec<(u32, u32)>)> = std::thread::scope(|s| {
        let work = || {
            let mut mine = Vec::new();
            loop {
                let start = next.fetch_add(per, Relaxed);
                if start >= words {
                    break mine;
                }
                mine.push((start, scan(start..(start + per).min(words))));
            }
        };
        let tasks: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut parts = work();
        for t in tasks {
            parts.extend(t.join().expect("a scan panicked"));
        }
        parts
    });
    // In id order, as one thread finds them.
    parts.sort_unstable_by_key(|p| p.0);
    parts.into_iter().flat_map(|p| p.1).collect()
}

/// `found` (pairs of frontier position in `lo..hi` and vertex id, in id order) ordered by
/// position, ids in order within one position: a stable counting sort, equal to sorting the
/// pairs, in two linear passes.
fn by_position(found: &[(u32, u32)], lo: u32, hi: u32) -> Vec<(u32, u32)> {
    let mut start = vec![0u32; (hi - lo) as usize + 1];
    for &(p, _) in found {
        start[(p - lo) as usize + 1] += 1;
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut out = vec![(0u32, 0u32); found.len()];
    for &(p, w) in found {
        let at = &mut start[(p - lo) as usize];
        out[*at as usize] = (p, w);
        *at += 1;
    }
    out
}

/// Loads issued this many frontier vertices ahead (see [`CsrGraph::bfs`]'s serial loop).
const LOOK_OFFSETS: usize = 16;
const LOOK_LIST: usize = 8;

/// The neighbour array of a search, filled page by page.
struct Pages<'a> {
    neighbours: NeighbourBytes<'a>,
    /// Per data page: read (or being read) already.
    loaded: Vec<bool>,
    /// Pages holding neighbour entries not read yet.
    left: u64,
    /// Pages read.
    read: u64,
    buf: PageBuf,
}

/// What reading one page needs: a page read through `read_page`, or unsealed from the map.
#[derive(Default)]
struct PageBuf {
    plain: Vec<u8>,
    run: crate::RunBuffers,
}

/// The bytes of the neighbour array in memory (u32 little-endian entries). A large one is an
/// anonymous mapping advised for transparent huge pages: filling tens of MiB page by page would
/// otherwise take one page fault per 4 KiB, which on a virtual machine costs as much as the
/// search itself.
enum NeighbourBytes<'a> {
    Heap(Vec<u8>),
    Mapped(memmap2::MmapMut),
    /// The neighbour array in place in the mapped data file (raw pages stored back to back):
    /// pages are checked when first needed but never copied.
    InFile(&'a [u8]),
}

impl<'a> NeighbourBytes<'a> {
    fn new(len: usize) -> Result<NeighbourBytes<'a>> {
        if len < 2 << 20 {
            return Ok(NeighbourBytes::Heap(vec![0; len]));
        }
        let map = memmap2::MmapMut::map_anon(len).map_err(|source| StoreError::Read {
            path: "an anonymous memory map".into(),
            source,
        })?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage); // advice only: fine if refused
        Ok(NeighbourBytes::Mapped(map))
    }

    fn bytes(&self) -> &[u8] {
        match self {
            NeighbourBytes::Heap(v) => v,
            NeighbourBytes::Mapped(m) => m,
            NeighbourBytes::InFile(b) => b,
        }
    }

    /// Where pages are copied to; `None` when the array is read in place.
    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            NeighbourBytes::Heap(v) => Some(v),
            NeighbourBytes::Mapped(m) => Some(m),
            NeighbourBytes::InFile(_) => None,
        }
    }
}

/// The offsets array in memory: u32 entries when `m` fits (half the cache footprint of the
/// random accesses a search makes), else u64.
#[derive(Debug)]
enum Offsets {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

trait Offset: Copy + Send + Sync {
    fn get(self) -> u64;
}

impl Offset for u32 {
    fn get(self) -> u64 {
        self as u64
    }
}

impl Offset for u64 {
    fn get(self) -> u64 {
        self
    }
}

/// What the threads of a parallel level share.
struct Expand<'a, O> {
    off: &'a [O],
    nbrs: &'a [u8],
    visited: &'a [AtomicU64],
    levels: &'a [AtomicU32],
    preds: &'a [AtomicU32],
    claims: &'a [AtomicU32],
    level: u32,
}

/// Expands the frontier `order[frontier]` on as many threads as `seen` has bitmaps (one per
/// thread, all zero, left zero); returns the vertices found, per chunk, in chunk order (their
/// concatenation is the serial FIFO order), and the edges traversed.
fn expand_parallel<O: Offset>(
    x: &Expand<'_, O>,
    order: &[u32],
    frontier: std::ops::Range<usize>,
    seen: &mut [Vec<u64>],
) -> (Vec<Vec<u32>>, u64) {
    // Chunks of consecutive frontier vertices, many per thread: threads take the next chunk
    // when done, so hubs do not hold one thread back while the others wait.
    let threads = seen.len();
    let size = (frontier.len() / (threads * 16)).clamp(64, 4096);
    let chunks: Vec<std::ops::Range<usize>> = (frontier.start..frontier.end)
        .step_by(size)
        .map(|lo| lo..(lo + size).min(frontier.end))
        .collect();
    let k = chunks.len();
    let candidates: Vec<OnceLock<Vec<(u32, u32)>>> = (0..k).map(|_| OnceLock::new()).collect();
    let found: Vec<OnceLock<Vec<u32>>> = (0..k).map(|_| OnceLock::new()).collect();
    let next1 = AtomicUsize::new(0);
    let next2 = AtomicUsize::new(0);
    let edges = AtomicU64::new(0);
    let barrier = Barrier::new(threads);
    let work = |mine_seen: &mut Vec<u64>| {
        // Phase 1: claim every unvisited neighbour with the smallest frontier position. A thread
        // takes chunks in increasing order, so only its first find of a vertex can win: its
        // own bitmap skips the others without touching the shared claims.
        loop {
            let c = next1.fetch_add(1, Relaxed);
            if c >= k {
                break;
            }
            let mut mine = Vec::new();
            let mut sink = 0u64;
            let mut chunk_edges = 0u64;
            for pos in chunks[c].clone() {
                let u = order[pos] as usize;
                let p = pos as u32;
                if let Some(&v) = order[..frontier.end].get(pos + LOOK_OFFSETS) {
                    sink ^= x.off[v as usize].get();
                }
                if let Some(&v) = order[..frontier.end].get(pos + LOOK_LIST) {
                    let a = 4 * x.off[v as usize].get() as usize;
                    sink ^= x.nbrs.get(a).copied().unwrap_or(0) as u64;
                }
                let (a, b) = (x.off[u].get() as usize, x.off[u + 1].get() as usize);
                chunk_edges += (b - a) as u64;
                for c in x.nbrs[4 * a..4 * b].chunks_exact(4) {
                    let w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    let (word, bit) = (w as usize / 64, 1u64 << (w % 64));
                    if (x.visited[word].load(Relaxed) | mine_seen[word]) & bit != 0 {
                        continue;
                    }
                    mine_seen[word] |= bit;
                    let claim = &x.claims[w as usize];
                    if claim.load(Relaxed) > p && claim.fetch_min(p, Relaxed) > p {
                        mine.push((w, p));
                    }
                }
            }
            std::hint::black_box(sink);
            edges.fetch_add(chunk_edges, Relaxed);
            let _ = candidates[c].set(mine);
        }
        mine_seen.fill(0);
        barrier.wait();
        // Phase 2: keep each vertex where its claim is.
        loop {
            let c = next2.fetch_add(1, Relaxed);
            if c >= k {
                break;
            }
            let cand = candidates[c].get().map(Vec::as_slice).unwrap_or(&[]);
            let mut kept = Vec::with_capacity(cand.len());
            for &(w, p) in cand {
                if x.claims[w as usize].load(Relaxed) == p {
                    x.visited[w as usize / 64].fetch_or(1 << (w % 64), Relaxed);
                    x.levels[w as usize].store(x.level, Relaxed);
                    x.preds[w as usize].store(order[p as usize], Relaxed);
                    kept.push(w);
                }
            }
            let _ = found[c].set(kept);
        }
    };
    std::thread::scope(|s| {
        let (first, rest) = seen.split_first_mut().expect("one thread at least");
        for bits in rest {
            s.spawn(move || work(bits));
        }
        work(first);
    });
    let found = found
        .into_iter()
        .map(|f| f.into_inner().unwrap_or_default())
        .collect();
    (found, edges.into_inner())
}
