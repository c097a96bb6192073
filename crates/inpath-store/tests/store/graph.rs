//! The graph kernels: BFS over CSR pages against a naive reference (adjacency lists and a
//! queue) on seeded random graphs, raw and sealed, every thread count, pages small enough that
//! the arrays cross many of them; the page chase against the order it was written in; and the
//! bad inputs (damaged pages, inconsistent headers and arrays, wrong keys) with their errors.

use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig};
use inpath_store::chase::{chase_order, chase_pread, CHASE_HEADER, END};
use inpath_store::graph::{NO_PREDECESSOR, UNREACHED};
use inpath_store::{
    chase, csr_bytes, random_edges, read_edge_list, ChasePages, CsrGraph, Entry, GraphKind,
    PutOptions, Stop, Store, StoreError,
};
use std::collections::VecDeque;
use std::path::Path;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u32 {
        (self.next() % n) as u32
    }
}

/// The reference: adjacency lists (sorted, duplicates kept) and a FIFO queue, as
/// scipy.sparse.csgraph.breadth_first_order walks a directed graph.
struct Reference {
    order: Vec<u32>,
    levels: Vec<u32>,
    preds: Vec<u32>,
    edges: u64,
}

fn adjacency(n: usize, edges: &[(u32, u32)], undirected: bool) -> Vec<Vec<u32>> {
    let mut adj = vec![Vec::new(); n];
    for &(u, v) in edges {
        adj[u as usize].push(v);
        if undirected && u != v {
            adj[v as usize].push(u);
        }
    }
    for row in &mut adj {
        row.sort_unstable();
    }
    adj
}

fn reference(adj: &[Vec<u32>], source: u32) -> Reference {
    let n = adj.len();
    let mut levels = vec![UNREACHED; n];
    let mut preds = vec![NO_PREDECESSOR; n];
    let mut order = Vec::new();
    let mut queue = VecDeque::from([source]);
    levels[source as usize] = 0;
    let mut edges = 0;
    while let Some(u) = queue.pop_front() {
        order.push(u);
        edges += adj[u as usize].len() as u64;
        for &w in &adj[u as usize] {
            if levels[w as usize] == UNREACHED {
                levels[w as usize] = levels[u as usize] + 1;
                preds[w as usize] = u;
                queue.push_back(w);
            }
        }
    }
    Reference {
        order,
        levels,
        preds,
        edges,
    }
}

fn key() -> (KeyRing, Key) {
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
    let mut ring = KeyRing::new();
    ring.insert(1, Key::new(&bytes).unwrap());
    (ring, Key::new(&bytes).unwrap())
}

fn sealed(key: &Key, page_size: u32) -> PutOptions<'_> {
    PutOptions {
        page_size,
        seal: Some((
            SealConfig {
                compression: Compression::Lz4,
                cipher: Cipher::Gcm,
            },
            Some((1, key)),
        )),
    }
}

fn raw(page_size: u32) -> PutOptions<'static> {
    PutOptions {
        page_size,
        seal: None,
    }
}

/// A graph with some of everything: random edges, self loops, duplicates, and a tail of
/// isolated vertices (`n` is larger than the ids used).
fn messy_edges(n: u32, m: usize, seed: u64) -> Vec<(u32, u32)> {
    let mut r = Rng(seed);
    let used = (n - n / 10).max(1) as u64;
    let mut edges: Vec<(u32, u32)> = (0..m).map(|_| (r.below(used), r.below(used))).collect();
    for i in 0..m / 20 {
        let v = r.below(used);
        edges.push((v, v)); // self loops
        if i < edges.len() {
            let e = edges[i];
            edges.push(e); // duplicates
        }
    }
    edges
}

fn check_bfs(
    store: &Store,
    entry: &Entry,
    adj: &[Vec<u32>],
    sources: &[u32],
    what: &str,
) -> Vec<inpath_store::Bfs> {
    let handle = store.open_handle(entry.handle.into()).unwrap();
    let graph = CsrGraph::open(&handle).unwrap();
    assert_eq!(graph.vertices(), adj.len() as u64, "{what}");
    let mut out = Vec::new();
    for &s in sources {
        let want = reference(adj, s);
        for threads in 1..=4 {
            for min_vertices in [0u64, 1024] {
                if threads == 1 && min_vertices == 0 {
                    continue;
                }
                let got = graph.bfs_with(s as u64, threads, min_vertices).unwrap();
                let ctx = format!("{what} source {s} threads {threads} min {min_vertices}");
                assert_eq!(got.order, want.order, "{ctx}");
                assert_eq!(got.levels, want.levels, "{ctx}");
                assert_eq!(got.predecessors, want.preds, "{ctx}");
                assert_eq!(got.edges_traversed, want.edges, "{ctx}");
                assert_eq!(got.reached(), want.order.len() as u64, "{ctx}");
                let mut sizes = vec![0u64; got.level_sizes.len()];
                for &v in &want.order {
                    sizes[want.levels[v as usize] as usize] += 1;
                }
                assert_eq!(got.level_sizes, sizes, "{ctx}");
                if threads == 1 {
                    out.push(got);
                }
            }
        }
    }
    out
}

/// A named graph: vertices, edges, undirected.
type Case = (&'static str, u64, Vec<(u32, u32)>, bool);

#[test]
fn bfs_equals_the_reference_on_random_graphs_raw_and_sealed_every_thread_count() {
    let (ring, key) = key();
    let cases: Vec<Case> = vec![
        ("one vertex", 1, vec![], false),
        ("one self loop", 1, vec![(0, 0)], true),
        ("two, no edges", 2, vec![], false),
        ("messy 50", 50, messy_edges(50, 120, 1), false),
        (
            "messy 3000 undirected",
            3000,
            messy_edges(3000, 2500, 2),
            true,
        ),
        (
            "uniform 20000",
            20_000,
            random_edges(GraphKind::Uniform, 20_000, 160_000, 3).unwrap(),
            false,
        ),
        (
            "uniform 30000 undirected",
            30_000,
            random_edges(GraphKind::Uniform, 30_000, 120_000, 4).unwrap(),
            true,
        ),
        (
            "rmat 16384",
            16_384,
            random_edges(GraphKind::Rmat, 16_384, 200_000, 5).unwrap(),
            false,
        ),
        (
            "rmat 5000 undirected",
            5_000,
            random_edges(GraphKind::Rmat, 5_000, 30_000, 6).unwrap(),
            true,
        ),
        // A long path: as many levels as vertices.
        ("path", 3000, (0..2999).map(|i| (i, i + 1)).collect(), false),
        // A star: one neighbour list across many pages.
        ("star", 20_000, (1..20_000).map(|i| (0, i)).collect(), true),
    ];
    for (i, (what, n, edges, undirected)) in cases.iter().enumerate() {
        let adj = adjacency(*n as usize, edges, *undirected);
        let mut sources = vec![0u32, (*n / 2) as u32, (*n - 1) as u32];
        sources.dedup();
        for (page_size, sealed_pages) in [(512u32, false), (4096, true), (8192, false)] {
            let dir = tempfile::tempdir().unwrap();
            let mut store = Store::create(dir.path()).unwrap().with_keys(&ring);
            let bytes = csr_bytes(*n, edges, *undirected, page_size).unwrap();
            let opts = if sealed_pages {
                sealed(&key, page_size)
            } else {
                raw(page_size)
            };
            let entry = store.put_reader(&bytes[..], what, &opts).unwrap();
            let ctx = format!("case {i} {what} page {page_size} sealed {sealed_pages}");
            let results = check_bfs(&store, &entry, &adj, &sources, &ctx);
            // The last source of "messy" graphs is an isolated vertex.
            if what.starts_with("messy") {
                let last = results.last().unwrap();
                assert_eq!(last.order, vec![(*n - 1) as u32], "{ctx}");
                assert_eq!(last.pages_read, 0, "{ctx}");
            }
        }
    }
}

#[test]
fn bfs_reads_only_the_pages_it_needs() {
    // Two components: a small one at the low ids, a large one after it.
    let mut edges: Vec<(u32, u32)> = (0..9).map(|i| (i, i + 1)).collect();
    let mut r = Rng(9);
    for _ in 0..100_000 {
        edges.push((10 + r.below(9990), 10 + r.below(9990)));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let bytes = csr_bytes(10_000, &edges, true, 512).unwrap();
    let e = store.put_reader(&bytes[..], "g", &raw(512)).unwrap();
    let graph = CsrGraph::open(&store.open_handle(e.handle.into()).unwrap()).unwrap();
    let small = graph.bfs(0, 1).unwrap();
    assert_eq!(small.reached(), 10);
    assert_eq!(small.pages_read, 1);
    let large = graph.bfs(10, 2).unwrap();
    assert_eq!(large.reached(), 9990);
    assert!(large.pages_read > 700, "{}", large.pages_read);
}

#[test]
fn the_csr_writer_lays_out_the_documented_bytes() {
    // 3 vertices, edges 0→2, 0→1, 2→0 (rows sorted), pages of 512 bytes.
    let bytes = csr_bytes(3, &[(0, 2), (0, 1), (2, 0)], false, 512).unwrap();
    assert_eq!(&bytes[..8], b"INPGRAPH");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), 0);
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!(u32_at(12), 512);
    assert_eq!((u64_at(16), u64_at(24), u64_at(32)), (3, 3, 1));
    assert!(bytes[40..60].iter().all(|&b| b == 0));
    assert_eq!(u32_at(60), crc32fast::hash(&bytes[..60]));
    let offsets: Vec<u64> = (0..4).map(|i| u64_at(64 + 8 * i)).collect();
    assert_eq!(offsets, [0, 2, 2, 3]);
    let nbrs: Vec<u32> = (0..3).map(|i| u32_at(96 + 4 * i)).collect();
    assert_eq!(nbrs, [1, 2, 0]);
    assert!(bytes[108..512].iter().all(|&b| b == 0));
    assert_eq!(bytes.len(), 512 + 4 + 4);
    assert_eq!(u32_at(512), crc32fast::hash(&bytes[..512]));
    assert_eq!(u32_at(516), crc32fast::hash(&bytes[512..516]));

    let undirected = csr_bytes(3, &[(0, 2), (1, 1)], true, 512).unwrap();
    assert_eq!(u16::from_le_bytes([undirected[10], undirected[11]]), 1);
    let off: Vec<u64> = (0..4)
        .map(|i| u64::from_le_bytes(undirected[64 + 8 * i..72 + 8 * i].try_into().unwrap()))
        .collect();
    assert_eq!(off, [0, 1, 2, 3]); // 0→2, 1→1 once, 2→0

    for (n, edges, page, want) in [
        (2u64, vec![(0u32, 2u32)], 512u32, "edge"),
        (2, vec![], 500, "page size"),
        (2, vec![], 516, "page size"),
        (u32::MAX as u64, vec![], 512, "vertices"),
    ] {
        match csr_bytes(n, &edges, false, page) {
            Err(StoreError::Parameter { name, .. }) => assert_eq!(name, want),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn edge_lists_parse_with_comments_and_name_the_bad_line() {
    let text = b"# a comment\n% another\n\n0 1\n1\t2\n 2,0 \r\n7 7\n";
    let (edges, need) = read_edge_list(&text[..], Path::new("e.txt")).unwrap();
    assert_eq!(edges, [(0, 1), (1, 2), (2, 0), (7, 7)]);
    assert_eq!(need, 8);
    for (bad, line) in [
        (&b"0 1\n1\n"[..], 2u64),
        (b"0 1 2\n", 1),
        (b"0 x\n", 1),
        (b"0 -1\n", 1),
        (b"0 4294967295\n", 1),
        (b"\n\n0 99999999999\n", 3),
    ] {
        match read_edge_list(bad, Path::new("e.txt")) {
            Err(e @ StoreError::EdgeList { .. }) => {
                let StoreError::EdgeList { line: l, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*l, line, "{e}");
                assert!(e.to_string().starts_with(&format!("e.txt line {line}: ")));
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
}

#[test]
fn random_graphs_repeat_with_the_seed() {
    for kind in [GraphKind::Uniform, GraphKind::Rmat] {
        let a = random_edges(kind, 1000, 5000, 7).unwrap();
        assert_eq!(a, random_edges(kind, 1000, 5000, 7).unwrap());
        assert_ne!(a, random_edges(kind, 1000, 5000, 8).unwrap());
        assert!(a.iter().all(|&(u, v)| u < 1000 && v < 1000));
        assert_eq!(GraphKind::parse(kind.name()).unwrap(), kind);
    }
    // R-MAT is skewed: its largest degree is far above the uniform graph's.
    let max_degree = |edges: &[(u32, u32)]| {
        let mut d = vec![0u32; 1 << 14];
        for &(u, _) in edges {
            d[u as usize] += 1;
        }
        *d.iter().max().unwrap()
    };
    let rmat = random_edges(GraphKind::Rmat, 1 << 14, 1 << 18, 1).unwrap();
    let uniform = random_edges(GraphKind::Uniform, 1 << 14, 1 << 18, 1).unwrap();
    assert!(max_degree(&rmat) > 10 * max_degree(&uniform));
    assert!(random_edges(GraphKind::Uniform, 0, 1, 1).is_err());
    assert!(GraphKind::parse("grid").is_err());
}

// ---- bad graphs ----

/// Recomputes every checksum of a CSR file after a test changed a field.
fn reseal(bytes: &mut [u8], page: usize) {
    let crc = crc32fast::hash(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    let t = u64::from_le_bytes(bytes[32..40].try_into().unwrap()) as usize;
    for k in 0..t {
        let crc = crc32fast::hash(&bytes[k * page..(k + 1) * page]);
        bytes[t * page + 4 * k..t * page + 4 * k + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let table = t * page..t * page + 4 * t;
    let crc = crc32fast::hash(&bytes[table.clone()]);
    bytes[table.end..table.end + 4].copy_from_slice(&crc.to_le_bytes());
}

fn graph_fixture() -> (Vec<(u32, u32)>, Vec<u8>) {
    let edges = random_edges(GraphKind::Uniform, 2000, 8000, 11).unwrap();
    let bytes = csr_bytes(2000, &edges, true, 512).unwrap();
    (edges, bytes)
}

/// Puts `bytes` raw in pages of `page` bytes and opens it as a graph, then searches from 0.
fn open_and_search(bytes: &[u8], page: u32) -> Result<inpath_store::Bfs, StoreError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let e = store.put_reader(bytes, "g", &raw(page)).unwrap();
    let graph = CsrGraph::open(&store.open_handle(e.handle.into()).unwrap())?;
    graph.bfs(0, 2)
}

fn corrupt_page(err: StoreError) -> (u64, String) {
    let text = err.to_string();
    match err {
        StoreError::Corrupt {
            handle,
            format,
            page,
            ..
        } => {
            assert_eq!((handle, format), (1, "CSR graph"), "{text}");
            (page, text)
        }
        other => panic!("expected a corrupt page, got {other:?}: {text}"),
    }
}

#[test]
fn a_flipped_byte_in_a_raw_graph_page_is_caught_and_the_page_named() {
    let (_, bytes) = graph_fixture();
    let n = 2000u64;
    let nb_start = 64 + 8 * (n + 1);
    // In the header, in the offsets, in the neighbours (early and late), in the padding.
    let t = u64::from_le_bytes(bytes[32..40].try_into().unwrap());
    for at in [
        20u64,
        100,
        nb_start - 3,
        nb_start + 1000,
        t * 512 - 513,
        t * 512 - 1,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::create(dir.path()).unwrap();
        let e = store.put_reader(&bytes[..], "g", &raw(512)).unwrap();
        let data = dir.path().join("pages").join(e.data_file_name());
        let mut file = std::fs::read(&data).unwrap();
        file[at as usize] ^= 0x10;
        std::fs::write(&data, &file).unwrap();
        let handle = store.open_handle(e.handle.into()).unwrap();
        let err = match CsrGraph::open(&handle) {
            Err(e) => e,
            Ok(g) => {
                // The damage is in a neighbour page: found when the search reads it.
                let err = g.bfs(0, 1).unwrap_err();
                assert!(at >= nb_start - 8, "byte {at}: {err}");
                err
            }
        };
        let (page, text) = corrupt_page(err);
        assert_eq!(page, at / 512, "byte {at}: {text}");
        assert!(text.contains("CRC-32"), "{text}");
        assert!(
            text.starts_with(&format!(
                "the CSR graph in handle 1 is corrupt at page {page}: "
            )),
            "{text}"
        );
    }
}

#[test]
fn inconsistent_graphs_with_valid_checksums_are_refused_with_the_page() {
    let (_, bytes) = graph_fixture();
    let n = 2000usize;
    let nb_start = 64 + 8 * (n + 1);
    let set_u64 =
        |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());

    // offsets decrease at vertex 700.
    let mut b = bytes.clone();
    let o700 = u64::from_le_bytes(b[64 + 8 * 700..72 + 8 * 700].try_into().unwrap());
    set_u64(&mut b, 64 + 8 * 701, o700 - 1);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, (64 + 8 * 701) as u64 / 512, "{text}");
    assert!(text.contains("offsets decrease at vertex 700"), "{text}");

    // offsets[0] is not 0.
    let mut b = bytes.clone();
    set_u64(&mut b, 64, 1);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, 0, "{text}");

    // offsets[n] is not m (it is less: the last vertex's list is cut short).
    let mut b = bytes.clone();
    let m = u64::from_le_bytes(b[24..32].try_into().unwrap());
    set_u64(&mut b, 64 + 8 * n, m - 1);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, (64 + 8 * n) as u64 / 512, "{text}");
    assert!(text.contains("offsets[n]"), "{text}");

    // A neighbour id >= n, found when the search reads its page.
    let mut b = bytes.clone();
    let at = nb_start + 4 * 5000;
    b[at..at + 4].copy_from_slice(&2000u32.to_le_bytes());
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, at as u64 / 512, "{text}");
    assert!(
        text.contains("neighbour entry 5000") && text.contains("is 2000, not below"),
        "{text}"
    );

    // A header whose counts do not fit the file.
    let mut b = bytes.clone();
    set_u64(&mut b, 16, 2100);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, 0, "{text}");
    assert!(text.contains("data pages in the header"), "{text}");
    // One vertex more fits the same pages: then offsets[n] is read from the neighbours.
    let mut b = bytes.clone();
    set_u64(&mut b, 16, 2001);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, (64 + 8 * 2001) / 512, "{text}");
    assert!(text.contains("offsets[n] = "), "{text}");
    let mut b = bytes.clone();
    set_u64(&mut b, 24, u64::MAX / 2);
    reseal(&mut b, 512);
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, 0, "{text}");
    let mut b = bytes.clone();
    set_u64(&mut b, 16, u64::MAX);
    reseal(&mut b, 512);
    assert!(matches!(
        open_and_search(&b, 512),
        Err(StoreError::Corrupt { page: 0, .. })
    ));
    // Unknown flags, reserved bytes.
    let mut b = bytes.clone();
    b[10] = 6;
    reseal(&mut b, 512);
    let (_, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert!(text.contains("unknown flags"), "{text}");
    let mut b = bytes.clone();
    b[50] = 1;
    reseal(&mut b, 512);
    let (_, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert!(text.contains("reserved"), "{text}");

    // A truncated file, an extended one.
    for len in [bytes.len() - 4, bytes.len() - 600, bytes.len() + 512] {
        let mut b = bytes.clone();
        b.resize(len, 0);
        let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
        assert_eq!(page, 0, "{text}");
        assert!(text.contains("truncated or extended"), "{text}");
    }

    // A damaged page CRC table.
    let mut b = bytes.clone();
    let t = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
    b[t * 512 + 9] ^= 1;
    let (page, text) = corrupt_page(open_and_search(&b, 512).unwrap_err());
    assert_eq!(page, t as u64, "{text}");
    assert!(text.contains("page CRC table"), "{text}");
}

#[test]
fn not_a_graph_newer_versions_and_other_page_sizes_are_named() {
    let (_, bytes) = graph_fixture();
    match open_and_search(&[b'h'; 63], 512) {
        Err(e @ StoreError::NotFormat { .. }) => assert_eq!(
            e.to_string(),
            "handle 1 does not hold a CSR graph: it is 63 bytes, shorter than the 64-byte header"
        ),
        other => panic!("{other:?}"),
    }
    let text = vec![b'x'; 5000];
    match open_and_search(&text, 512) {
        Err(e @ StoreError::NotFormat { .. }) => {
            assert!(e.to_string().contains("not the magic \"INPGRAPH\""), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let mut b = bytes.clone();
    b[8] = 2;
    reseal(&mut b, 512);
    match open_and_search(&b, 512) {
        Err(e @ StoreError::FormatVersion { .. }) => assert_eq!(
            e.to_string(),
            "handle 1 holds a CSR graph of format version 2; this build reads versions 1 to 1"
        ),
        other => panic!("{other:?}"),
    }
    let mut b = bytes.clone();
    b[8] = 0;
    reseal(&mut b, 512);
    assert!(matches!(
        open_and_search(&b, 512),
        Err(StoreError::Corrupt { page: 0, .. })
    ));
    // A damaged version byte fails the header CRC (not "a newer version").
    let mut b = bytes.clone();
    b[8] = 2;
    assert!(matches!(
        open_and_search(&b, 512),
        Err(StoreError::Corrupt { page: 0, .. })
    ));
    match open_and_search(&bytes, 1024) {
        Err(e @ StoreError::PageSizeMismatch { .. }) => assert_eq!(
            e.to_string(),
            "the CSR graph in handle 1 is laid out for 512-byte pages but is stored in 1024-byte \
             pages (put it again with --page-size 512)"
        ),
        other => panic!("{other:?}"),
    }
    // A source past the last vertex.
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let e = store.put_reader(&bytes[..], "g", &raw(512)).unwrap();
    let graph = CsrGraph::open(&store.open_handle(e.handle.into()).unwrap()).unwrap();
    match graph.bfs(2000, 1) {
        Err(StoreError::Parameter { name, .. }) => assert_eq!(name, "source"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sealed_graphs_refuse_a_wrong_key_and_a_damaged_page() {
    let (ring, key) = key();
    let (_, bytes) = graph_fixture();
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap().with_keys(&ring);
    let e = store
        .put_reader(&bytes[..], "g", &sealed(&key, 512))
        .unwrap();

    let mut other = KeyRing::new();
    other.insert(1, Key::new(&[9u8; 32]).unwrap());
    let wrong = Store::open(dir.path()).unwrap().with_keys(&other);
    let err = CsrGraph::open(&wrong.open_handle(e.handle.into()).unwrap()).unwrap_err();
    assert!(matches!(err, StoreError::Unseal { page: 0, .. }), "{err:?}");
    let nokey = Store::open(dir.path()).unwrap();
    assert!(matches!(
        nokey.open_handle(e.handle.into()),
        Err(StoreError::KeyNeeded { .. })
    ));

    // Damage a neighbour page's record: the search names it.
    let page = (64 + 8 * 2001 + 4 * 6000) / 512;
    let ext = e.extents[page as usize];
    let data = dir.path().join("pages").join(e.data_file_name());
    let mut file = std::fs::read(&data).unwrap();
    file[(ext.offset + ext.len as u64 / 2) as usize] ^= 1;
    std::fs::write(&data, &file).unwrap();
    let graph = CsrGraph::open(&store.open_handle(e.handle.into()).unwrap()).unwrap();
    match graph.bfs(0, 2) {
        Err(StoreError::Unseal { page: p, .. }) => assert_eq!(p, page),
        other => panic!("{other:?}"),
    }
}

// ---- the page chase ----

fn chase_store(
    pages: u64,
    page: u32,
    seed: u64,
    cycle: bool,
    key: Option<&Key>,
) -> (tempfile::TempDir, Store, Entry) {
    let dir = tempfile::tempdir().unwrap();
    let (ring, _) = self::key();
    let mut store = Store::create(dir.path()).unwrap().with_keys(&ring);
    let opts = match key {
        Some(k) => sealed(k, page),
        None => raw(page),
    };
    let e = store
        .put_reader(
            ChasePages::new(pages, page, seed, cycle).unwrap(),
            "c",
            &opts,
        )
        .unwrap();
    (dir, store, e)
}

#[test]
fn the_chase_visits_the_written_order_raw_and_sealed() {
    let (_, key) = key();
    for (pages, page, seed) in [
        (1u64, 512u32, 1u64),
        (2, 512, 2),
        (300, 512, 3),
        (100, 8192, 4),
    ] {
        let order = chase_order(pages, seed);
        assert_eq!(order[0], 0);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..pages).collect::<Vec<_>>());
        for k in [None, Some(&key)] {
            let (dir, store, e) = chase_store(pages, page, seed, false, k);
            assert_eq!((e.size, e.pages()), (pages * page as u64, pages));
            let h = store.open_handle(e.handle.into()).unwrap();
            let got = chase(&h, 0, u64::MAX).unwrap();
            assert_eq!(got.sequence, order);
            assert_eq!(got.stop, Stop::End);
            // From the middle of the chain: the rest of it.
            let mid = order.len() / 2;
            let got = chase(&h, order[mid], u64::MAX).unwrap();
            assert_eq!(got.sequence, order[mid..]);
            // Bounded by hops.
            let got = chase(&h, 0, 1).unwrap();
            assert_eq!(got.sequence, order[..1]);
            let want = if pages == 1 { Stop::End } else { Stop::MaxHops };
            assert_eq!(got.stop, want);
            assert_eq!(chase(&h, 0, 0).unwrap().sequence, Vec::<u64>::new());
            if k.is_none() {
                let file =
                    std::fs::File::open(dir.path().join("pages").join(e.data_file_name())).unwrap();
                assert_eq!(chase_pread(&file, &e, 0, u64::MAX).unwrap().sequence, order);
                assert_eq!(
                    chase_pread(&file, &e, 0, 3).unwrap().sequence,
                    order[..3.min(order.len())]
                );
            }
        }
    }
}

#[test]
fn a_cyclic_chain_stops_at_the_cycle_and_max_hops_bounds_it() {
    let order = chase_order(50, 9);
    let (_dir, store, e) = chase_store(50, 512, 9, true, None);
    let h = store.open_handle(e.handle.into()).unwrap();
    let got = chase(&h, 0, u64::MAX).unwrap();
    assert_eq!(got.sequence, order);
    assert_eq!(got.stop, Stop::Cycle { page: 0 });
    let got = chase(&h, order[10], u64::MAX).unwrap();
    let mut want = order[10..].to_vec();
    want.extend_from_slice(&order[..10]);
    assert_eq!(got.sequence, want);
    assert_eq!(got.stop, Stop::Cycle { page: order[10] });
    let got = chase(&h, 0, 20).unwrap();
    assert_eq!((got.sequence.len(), got.stop), (20, Stop::MaxHops));
    // The hop bound is the page count: the cycle is still seen.
    let got = chase(&h, 0, 50).unwrap();
    assert_eq!(
        (got.sequence.len(), got.stop),
        (50, Stop::Cycle { page: 0 })
    );
}

/// A chase page with a valid header naming `next`.
fn chase_page(page_size: u32, me: u64, next: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(b"INPCHASE");
    p.extend_from_slice(&1u16.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&page_size.to_le_bytes());
    p.extend_from_slice(&me.to_le_bytes());
    p.extend_from_slice(&next.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    let crc = crc32fast::hash(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(p.len(), CHASE_HEADER);
    p.resize(page_size as usize, 0xee);
    p
}

fn chase_err(file: &[u8], page_size: u32, start: u64) -> StoreError {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let e = store.put_reader(file, "c", &raw(page_size)).unwrap();
    chase(
        &store.open_handle(e.handle.into()).unwrap(),
        start,
        u64::MAX,
    )
    .unwrap_err()
}

#[test]
fn bad_chase_files_fail_with_the_page() {
    // The hand-made file equals the generator's headers.
    let gen_bytes = {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut ChasePages::new(3, 512, 5, false).unwrap(), &mut v)
            .unwrap();
        v
    };
    let order = chase_order(3, 5);
    for k in 0..3 {
        let pos = order.iter().position(|&p| p == k as u64).unwrap();
        let next = order.get(pos + 1).copied().unwrap_or(END);
        assert_eq!(
            gen_bytes[k * 512..k * 512 + 40],
            chase_page(512, k as u64, next)[..40]
        );
    }

    // A next page past the end.
    let mut file = chase_page(512, 0, 1);
    file.extend(chase_page(512, 1, 7));
    let err = chase_err(&file, 512, 0);
    assert_eq!(
        err.to_string(),
        "the chase file in handle 1 is corrupt at page 1: the page names page 7 as the next, past \
         the last page 1"
    );
    // A damaged header byte.
    let mut file = chase_page(512, 0, 1);
    file.extend(chase_page(512, 1, END));
    file[512 + 25] ^= 4;
    let err = chase_err(&file, 512, 0);
    assert!(
        matches!(err, StoreError::Corrupt { page: 1, .. }) && err.to_string().contains("CRC-32"),
        "{err}"
    );
    // A damaged payload byte is not the kernel's business.
    let mut file = chase_page(512, 0, 1);
    file.extend(chase_page(512, 1, END));
    file[300] ^= 4;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(dir.path()).unwrap();
    let e = store.put_reader(&file[..], "c", &raw(512)).unwrap();
    let h = store.open_handle(e.handle.into()).unwrap();
    assert_eq!(chase(&h, 0, 9).unwrap().sequence, [0, 1]);
    // A page out of place.
    let mut file = chase_page(512, 0, 1);
    file.extend(chase_page(512, 0, END));
    let err = chase_err(&file, 512, 0);
    assert!(err.to_string().contains("says it is page 0"), "{err}");
    // Not a chase file; a later page that is not one.
    let err = chase_err(&[b'z'; 2048], 512, 1);
    assert!(
        matches!(err, StoreError::NotFormat { .. })
            && err
                .to_string()
                .starts_with("handle 1 does not hold a chase file: page 1 starts with"),
        "{err}"
    );
    let mut file = chase_page(512, 0, 1);
    file.extend([0u8; 512]);
    assert!(matches!(
        chase_err(&file, 512, 0),
        StoreError::Corrupt { page: 1, .. }
    ));
    // A newer version; another page size; a short last page.
    let mut file = chase_page(512, 0, END);
    file[8] = 2;
    let crc = crc32fast::hash(&file[..36]);
    file[36..40].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        chase_err(&file, 512, 0).to_string(),
        "handle 1 holds a chase file of format version 2; this build reads versions 1 to 1"
    );
    let mut file = chase_page(1024, 0, END);
    file.truncate(512);
    assert!(matches!(
        chase_err(&file, 512, 0),
        StoreError::PageSizeMismatch {
            written: 1024,
            stored: 512,
            ..
        }
    ));
    let mut file = chase_page(512, 0, 1);
    file.extend([1u8; 20]);
    let err = chase_err(&file, 512, 0);
    assert!(
        err.to_string().contains("shorter than the 40-byte header"),
        "{err}"
    );
    // A start page past the end.
    let file = chase_page(512, 0, END);
    assert!(matches!(
        chase_err(&file, 512, 1),
        StoreError::Parameter {
            name: "start page",
            ..
        }
    ));
}

#[test]
fn neighbours_of_equal_the_adjacency_lists_raw_and_sealed() {
    let n = 3000u32;
    let edges = messy_edges(n, 20_000, 21);
    let adj = adjacency(n as usize, &edges, false);
    let bytes = csr_bytes(n as u64, &edges, false, 512).unwrap();
    let (_ring, k) = key();
    for options in [raw(512), sealed(&k, 512)] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::create(dir.path()).unwrap().with_keys(&_ring);
        let e = store.put_reader(&bytes[..], "g", &options).unwrap();
        let graph = CsrGraph::open(&store.open_handle(e.handle.into()).unwrap()).unwrap();
        let mut r = Rng(5);
        let ask: Vec<u64> = (0..500).map(|_| r.below(n as u64) as u64).collect();
        let (targets, counts) = graph.neighbours_of(&ask).unwrap();
        let mut at = 0usize;
        for (&v, &c) in ask.iter().zip(&counts) {
            assert_eq!(c as usize, adj[v as usize].len());
            assert_eq!(&targets[at..at + c as usize], &adj[v as usize][..]);
            at += c as usize;
        }
        assert_eq!(at, targets.len());
        let err = graph.neighbours_of(&[n as u64]).unwrap_err().to_string();
        assert!(err.contains("below the vertex count 3000"), "{err}");
    }
}
