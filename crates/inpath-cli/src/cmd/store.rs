//! `inpath store`: BlueDBM's in-store processing. A directory of pages with a catalog of
//! handles; kernels (literal and regex search, Hamming nearest neighbours, breadth-first search
//! over CSR pages, the page chase) run beside the pages and print results, not bytes.
//! docs/store.md.

use crate::cmd::seal::sealing_key;
use crate::common::read_keys;
use crate::common::KeyFile;
use crate::common::{bytes, parse_size, print_out, thousands};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use inpath_core::output::Output;
use inpath_core::Input;
use inpath_seal::{Cipher, Compression, Key, SealConfig};
use inpath_store::chase::{chase_pread, ChasePages, Stop};
use inpath_store::graph::{csr_bytes, random_edges, read_edge_list, GraphKind};
use inpath_store::kernel::run;
use inpath_store::remote::{self, entry_json, from_hex, to_hex, Client, Request, Service};
use inpath_store::{FlashReader, Hamming, Literal, PutOptions, ReaderConfig, Store, Tier};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `inpath store`.
#[derive(Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Store a file in pages (raw, or sealed page by page); prints its handle.
    #[command(after_help = "Examples:
  inpath store put /srv/store access.log
  inpath store put /srv/store db.pages --page-size 64KiB --compress lz4 --seal-tier aes256-gcm --key-file keys.txt

Putting a name that is already in the store keeps its handle and bumps its generation.")]
    Put(PutArgs),
    /// List the handles: id, generation, size, pages, codec, name.
    Ls(LsArgs),
    /// Read a byte range of a handle (raw pages leave the store only through this verb).
    #[command(after_help = "Examples:
  inpath store read /srv/store 3 -o access.log
  inpath store read /srv/store 3@2 --offset 8192 --length 100 | xxd")]
    Read(ReadArgs),
    /// Remove a handle and its pages.
    Rm(RmArgs),
    /// Search a handle in the store: byte offsets of matches (like grep -b -o) or a line count.
    #[command(after_help = "Examples:
  inpath store grep /srv/store 3 needle               # OFFSET:MATCH per match, overlapping ones too
  inpath store grep /srv/store 3 needle --count       # lines with a match, like grep -c -F
  inpath store grep /srv/store 3 'err(or)?\\b' --regex --threads 2 --json")]
    Grep(GrepArgs),
    /// Hamming nearest neighbours of binary queries among a handle's fixed-size items.
    #[command(after_help = "Examples:
  inpath store nn /srv/store 4 --item-size 32 --queries q.bin -k 10 --json
  inpath store index /srv/store 4 --item-size 32            # once, for --lsh
  inpath store nn /srv/store 4 --item-size 32 --queries q.bin -k 10 --lsh --probe 1

Without --lsh: an exact flat scan (ties to the lowest index), SIMD kernels picked for the CPU
(INPATH_ISA caps them). With --lsh: approximate, through the handle's LSH index: only items
sharing a probed bucket with a query are read and compared (exact distances for those), so a
query may get fewer than k neighbours.")]
    Nn(NnArgs),
    /// Build the LSH index (bit sampling) of a handle's fixed-size items, for `nn --lsh`.
    #[command(after_help = "Examples:
  inpath store index /srv/store 4 --item-size 8192
  inpath store index /srv/store 4 --item-size 32 --tables 16 --bits 12 --threads 2

One scan over the handle; the index is written beside the store's data as DIR/index/ID.lsh
(docs/FORMATS.md, \"LSH index\") and is tied to the handle's generation: put the handle again
and the index must be built again (`nn --lsh` says so). More tables raise recall and the
index size (12 bytes per item per table); more bits make buckets smaller (fewer candidates,
lower recall). Bits per table: 1 to 32, and at most the item's bits.")]
    Index(IndexArgs),
    /// Store a graph as a CSR file in pages, from an edge list or a seeded random graph.
    #[command(after_help = "Examples:
  inpath store put-graph /srv/store roads --edges roads.txt --undirected
  inpath store put-graph /srv/store g --random rmat --vertices 1000000 --edge-count 16000000 --seed 7
  inpath store put-graph /srv/store web --edges web.txt --compress lz4 --seal-tier aes256-gcm --key-file keys.txt

An edge list holds one directed edge `U V` per line: decimal vertex ids from 0, separated by
spaces, a tab or a comma; blank lines and lines starting with # or % are skipped. --undirected
stores every edge both ways. Each vertex's neighbours are stored sorted; duplicate edges are
kept. The CSR file is laid out for the handle's page size (docs/FORMATS.md, \"CSR graph\").")]
    PutGraph(PutGraphArgs),
    /// Breadth-first search over a CSR graph in the store: vertices reached, levels, edges/s.
    #[command(after_help = "Examples:
  inpath store bfs /srv/store 5 --source 0
  inpath store bfs /srv/store 5 --source 42 --threads 2 --json
  inpath store bfs /srv/store 5 --source 42 --levels levels.txt   # VERTEX LEVEL PREDECESSOR lines

The visit order is scipy.sparse.csgraph.breadth_first_order's for a directed graph (FIFO,
neighbours in CSR order), the same for every --threads. With --json --arrays the output holds
the visit order, every vertex's level and its predecessor (-1: unreached, or the source).")]
    Bfs(BfsArgs),
    /// Store a chase file: pages linked in a seeded random order, each naming the next.
    #[command(after_help = "Examples:
  inpath store put-chase /srv/store chain --pages 32768
  inpath store put-chase /srv/store ring --pages 1000 --cycle --seed 3

The chain starts at page 0 and visits every page once; it ends there, or with --cycle it
returns to page 0. The page format is in docs/FORMATS.md (\"chase file\").")]
    PutChase(PutChaseArgs),
    /// Follow a chain of pages, each naming the next: one page read per hop.
    #[command(after_help = "Examples:
  inpath store chase /srv/store 6                    # from page 0 to the end of the chain
  inpath store chase /srv/store 6 --start 17 --hops 100 --sequence
  inpath store chase /srv/store 6 --json --repeat 5
  inpath store chase /srv/store 6 --raw --repeat 5    # baseline: plain pread, no checks

The chase stops at the end of the chain, after --hops pages (default: the handle's page count),
or at a page it visited before (a cycle).")]
    Chase(ChaseArgs),
    /// Sketch a handle in the store (HyperLogLog, Fast-AGMS, Count-Min, min/max/count): the
    /// SKT engine as an in-store tap; only the summary leaves the store.
    #[command(after_help = "Examples:
  inpath store sketch /srv/store 3                       # one item per line
  inpath store sketch /srv/store 7 -o format=u32 --threads 2 --json
  inpath store sketch --remote 127.0.0.1:7420 3 -o format=csv,column=user_id

Options are the `inpath wire --tap sketch:...` ones (docs/wire.md): format=u32|u64|lines|csv,
column, delimiter, no_header, hll_p, cm, agms, sketches, hash, seed, estimator.")]
    Sketch(TapArgs),
    /// Exact correlation statistics of a handle's fixed-width rows: the AMNES engine as an
    /// in-store tap.
    #[command(after_help = "Examples:
  inpath store corr /srv/store 8                          # rows of 16 u32 (64-byte lines)
  inpath store corr /srv/store 8 -o type=f64,streams=4 --threads 2 --json

Options are the `inpath wire --tap corr:...` ones: type, streams, constant=nan|zero.")]
    Corr(TapArgs),
    /// Bytes and CRC-32 (as zlib.crc32) of a handle, computed beside its pages.
    #[command(after_help = "Example:
  inpath store crc /srv/store 3 --threads 2")]
    Crc(TapArgs),
    /// Serve a store over TCP: kernel requests answered with results only (`--remote ADDR`
    /// on every verb but put-graph and put-chase).
    #[command(after_help = "Examples:
  inpath store serve /srv/store --listen 127.0.0.1:7420 --key-file keys.txt
  inpath store grep --remote 127.0.0.1:7420 3 needle --count
  inpath store ls --remote 127.0.0.1:7420 --json

  inpath tls init tls --host store1.example.com
  inpath tls token --tokens tokens --name ci --role read -o ci.token
  inpath store serve /srv/store --listen 0.0.0.0:7420 --tls-cert tls/server.pem \
      --tls-key tls/server.key --tokens tokens --tls-client-ca tls/ca.pem --client-cert-role write
  inpath store grep --remote store1.example.com:7420 3 needle --tls-ca tls/ca.pem --token-file ci.token

The server owns the directory and the keys; clients send requests and get results (counts,
offsets, neighbours) and, only through `read`, raw bytes. It prints `listening on ADDR` once
bound (port 0 picks a free port) and runs until stopped. Protocol: docs/FORMATS.md.
Beyond loopback the port needs TLS and authentication: client certificates (--tls-client-ca)
or tokens (--tokens), each with a role (read: kernels, read, ls, stats; write: also put, rm,
index); a refused request changes nothing and says why. See docs/SECURITY.md.")]
    Serve(ServeArgs),
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads); the result does not depend on them [default: 1]")))]
#[command(mut_arg("json", |a| a.help("Print JSON (with the counters: bytes scanned and returned, pages read, CPU per GB)")))]
struct TapArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, ID@GENERATION, or the name it was put under.
    handle: String,
    /// The tap's options, comma-separated KEY=VALUE (as in `inpath wire --tap NAME:OPTIONS`).
    #[arg(short, long, value_name = "OPTIONS")]
    options: Option<String>,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct ServeArgs {
    /// Store directory.
    dir: PathBuf,
    /// Address to listen on (HOST:PORT; port 0 picks a free one). Beyond loopback it needs
    /// TLS and authentication (--tls-cert with --tls-client-ca or --tokens), or
    /// --insecure-no-auth.
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// Most connections served at once.
    #[arg(long, default_value_t = 64, value_parser = crate::common::parse_max_connections)]
    max_conns: usize,
    #[command(flatten)]
    auth: crate::security::ServerAuth,
    #[command(flatten)]
    insecure: crate::security::Insecure,
    #[command(flatten)]
    web: crate::security::HttpArgs,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyFile,
}

/// Where a verb finds its store: a directory, or with `--remote` a server's address.
#[derive(Args)]
struct Location {
    /// Store directory, or with --remote the HOST:PORT of `inpath store serve`.
    #[arg(value_name = "DIR|ADDR")]
    store: String,
    /// The store is a server (`inpath store serve`) at the address given instead of DIR.
    #[arg(long)]
    remote: bool,
    #[command(flatten)]
    tls: crate::security::ClientTls,
}

impl Location {
    /// A connection to the server at `store`, over TLS and with a token when the flags say.
    fn connect(&self) -> Result<Client> {
        let credentials = self.tls.credentials()?;
        Ok(Client::connect_with(&self.store, &credentials)?)
    }

    /// Refuses the client TLS flags on a local store.
    fn local_only(&self) -> Result<()> {
        if self.tls.given() {
            bail!("--tls-ca, --tls-cert, --tls-key and --token-file are for a server (--remote)");
        }
        Ok(())
    }
}

/// How a verb that writes a handle lays out and seals its pages.
#[derive(Args)]
struct PageArgs {
    /// Page size (512 bytes to 16 MiB).
    #[arg(long, default_value = "8KiB", value_parser = parse_size)]
    page_size: u64,
    /// Seal each page with this cipher: aes256-gcm, aes{128,192,256}-{ecb,ctr,cbc} or none.
    #[arg(long)]
    seal_tier: Option<String>,
    /// Compress each page (sealed tier): none, deflate[-LEVEL], lz4, zstd[-LEVEL], snappy.
    #[arg(long)]
    compress: Option<String>,
    /// Key id to seal with (default: the first key in the file).
    #[arg(long)]
    key_id: Option<u32>,
    #[command(flatten)]
    keys: KeyFile,
}

#[derive(Args)]
struct PutArgs {
    /// A missing directory is created with an empty catalog; a server seals with its own keys.
    #[command(flatten)]
    at: Location,
    /// File to store.
    file: PathBuf,
    /// Name in the catalog (default: the file's name).
    #[arg(long)]
    name: Option<String>,
    #[command(flatten)]
    pages: PageArgs,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct PutGraphArgs {
    /// Store directory (created with an empty catalog when missing).
    dir: PathBuf,
    /// Name in the catalog.
    name: String,
    /// Edge list file: one `U V` per line.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "random",
        conflicts_with = "random"
    )]
    edges: Option<PathBuf>,
    /// Generate a random graph instead: uniform (both ends uniform) or rmat (Graph500's skewed
    /// R-MAT); needs --vertices and --edge-count.
    #[arg(long, value_name = "KIND", requires_all = ["vertices", "edge_count"])]
    random: Option<String>,
    /// Vertex count (default with --edges: the largest id + 1).
    #[arg(long)]
    vertices: Option<u64>,
    /// Edges of the random graph (before --undirected doubles them).
    #[arg(long, requires = "random")]
    edge_count: Option<u64>,
    /// Seed of the random graph.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Store every edge both ways (a self loop once).
    #[arg(long)]
    undirected: bool,
    #[command(flatten)]
    pages: PageArgs,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Threads: each level's frontier is cut across them (the result does not change) [default: 1]")))]
struct BfsArgs {
    #[command(flatten)]
    at: Location,
    /// Handle of a CSR graph: ID, ID@GENERATION, or its name.
    handle: String,
    /// The vertex to start from.
    #[arg(long)]
    source: u64,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Write `VERTEX LEVEL PREDECESSOR` for every vertex reached, in visit order, to FILE
    /// (`-` for standard output); the source's predecessor is -1.
    #[arg(long, value_name = "FILE")]
    levels: Option<String>,
    /// With --json: also the visit order, the level and the predecessor of every vertex.
    #[arg(long, requires = "json")]
    arrays: bool,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct PutChaseArgs {
    /// Store directory (created with an empty catalog when missing).
    dir: PathBuf,
    /// Name in the catalog.
    name: String,
    /// Pages in the chain.
    #[arg(long)]
    pages: u64,
    /// Seed of the page order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The last page names page 0 again: the chain is a cycle.
    #[arg(long)]
    cycle: bool,
    #[command(flatten)]
    layout: PageArgs,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
#[command(mut_arg("json", |a| a.help("Print JSON (with the sequence)")))]
struct ChaseArgs {
    #[command(flatten)]
    at: Location,
    /// Handle of a chase file: ID, ID@GENERATION, or its name.
    handle: String,
    /// The page to start from.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Read at most this many pages (default: the handle's page count).
    #[arg(long)]
    hops: Option<u64>,
    /// Print the pages visited, one per line, after the summary.
    #[arg(long)]
    sequence: bool,
    /// Run the chase this many times and report the median time (the page cache warms up).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Baseline for benchmarks: plain pread of each raw page from the handle's data file,
    /// following the next-page field with no checks.
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct LsArgs {
    #[command(flatten)]
    at: Location,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct ReadArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID or the name it was put under, or ID@GENERATION to refuse a replaced file.
    handle: String,
    /// First byte.
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// Bytes to read (default: to the end).
    #[arg(long)]
    length: Option<u64>,
    /// Output file, or `-` for standard output.
    #[arg(short, long, default_value = "-")]
    output: String,
    #[command(flatten)]
    keys: KeyFile,
}

#[derive(Args)]
struct RmArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, ID@GENERATION, or the name it was put under.
    handle: String,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads), each scanning a contiguous range of pages [default: 1]")))]
#[command(mut_arg("json", |a| a.help("Print JSON (with the counters: bytes scanned and returned, pages read, CPU per GB)")))]
struct GrepArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, ID@GENERATION, or the name it was put under.
    handle: String,
    /// Pattern: a literal byte string, or with --regex a regular expression (Rust regex syntax).
    /// A pattern may begin with `-` (`-x`, or after `--`).
    #[arg(allow_hyphen_values = true)]
    pattern: String,
    /// The pattern is a regular expression, matched line by line.
    #[arg(long)]
    regex: bool,
    /// Print only the number of lines with a match (as grep -c).
    #[arg(short, long)]
    count: bool,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

/// How a kernel's lanes read the pages.
#[derive(Args)]
struct ReadPathArgs {
    /// Read with O_DIRECT through the read workers: past the page cache, for cold scans that
    /// should not evict what the cache holds.
    #[arg(long)]
    direct: bool,
    /// Read through the read workers (pread) even when the data file can be memory-mapped.
    #[arg(long)]
    no_map: bool,
    /// Read workers (pread), with up to 32 reads queued: 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = parse_readers)]
    readers: usize,
    /// The most bytes one worker read fetches (whole pages stored back to back): 4KiB to 64MiB.
    #[arg(long, default_value = "256KiB", value_parser = parse_read_size)]
    read_size: u64,
}

fn parse_readers(text: &str) -> std::result::Result<usize, String> {
    let max = inpath_store::reader::MAX_WORKERS;
    text.trim()
        .parse()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| format!("readers = {text} is out of range: 1 to {max}"))
}

fn parse_read_size(text: &str) -> std::result::Result<u64, String> {
    let max = inpath_store::reader::MAX_SEGMENT;
    let n = parse_size(text)?;
    if (4096..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "read size {text} is out of range: 4KiB to {}MiB",
            max >> 20
        ))
    }
}

impl ReadPathArgs {
    fn reader(&self) -> FlashReader {
        FlashReader::new(ReaderConfig {
            workers: self.readers,
            segment: self.read_size,
            direct: self.direct,
            mapped: !self.no_map,
            ..ReaderConfig::default()
        })
    }
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads) [default: 1]")))]
struct NnArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, ID@GENERATION, or the name it was put under.
    handle: String,
    /// Item size in bytes (the handle's size must be a multiple).
    #[arg(long)]
    item_size: usize,
    /// File of queries, item-size bytes each, back to back.
    #[arg(long)]
    queries: PathBuf,
    /// Neighbours per query.
    #[arg(short, default_value_t = 1)]
    k: usize,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Approximate search through the handle's LSH index (`inpath store index`).
    #[arg(long)]
    lsh: bool,
    /// With --lsh: multi-probe radius, also the buckets whose keys differ in up to this many
    /// bits (0 to 2).
    #[arg(long, default_value_t = 0, requires = "lsh")]
    probe: u32,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
#[command(mut_arg("threads", |a| a.help("Lanes (threads) of the build scan [default: 1]")))]
struct IndexArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, ID@GENERATION, or the name it was put under.
    handle: String,
    /// Item size in bytes (the handle's size must be a multiple).
    #[arg(long)]
    item_size: usize,
    /// Hash tables (1 to 64).
    #[arg(long, default_value_t = inpath_store::lsh::DEFAULT_TABLES)]
    tables: u32,
    /// Sampled bits per table (1 to 32, at most the item's bits).
    #[arg(long, default_value_t = inpath_store::lsh::DEFAULT_BITS)]
    bits: u32,
    /// Seed of the sampled bit positions.
    #[arg(long, default_value_t = inpath_store::lsh::DEFAULT_SEED)]
    seed: u64,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Runs `inpath store`.
pub fn run_store(args: StoreArgs) -> Result<()> {
    match args.action {
        Action::Put(a) => put(a),
        Action::Ls(a) => ls(a),
        Action::Read(a) => read(a),
        Action::Rm(a) => rm(a),
        Action::Grep(a) => grep(a),
        Action::Nn(a) => nn(a),
        Action::Index(a) => index(a),
        Action::PutGraph(a) => put_graph(a),
        Action::Bfs(a) => bfs(a),
        Action::PutChase(a) => put_chase(a),
        Action::Chase(a) => chase(a),
        Action::Sketch(a) => tap("sketch", a),
        Action::Corr(a) => tap("corr", a),
        Action::Crc(a) => tap("crc", a),
        Action::Serve(a) => serve(a),
    }
}

/// A local store (a service over the directory) or a connection to a server.
enum Target {
    Local(Box<Service>),
    Remote(Client),
}

impl Target {
    fn open(at: &Location, keys: &KeyFile, read: Option<&ReadPathArgs>) -> Result<Target> {
        if at.remote {
            if keys.key_file.is_some() {
                bail!(
                    "--key-file is for a local store; a server uses the keys it was started with"
                );
            }
            return Ok(Target::Remote(at.connect()?));
        }
        at.local_only()?;
        let dir = PathBuf::from(&at.store);
        // Opened here so a bad directory or key file is reported before any work; the
        // service answers the request from this opening.
        let store = open(&dir, keys)?;
        let ring = match &keys.key_file {
            Some(path) => Some(read_keys(path, keys.allow_insecure_key_file)?.ring),
            None => None,
        };
        let reader = match read {
            Some(r) => r.reader(),
            None => FlashReader::new(ReaderConfig::default()),
        };
        Ok(Target::Local(Box::new(
            Service::new(dir, ring, reader).with_opened(store),
        )))
    }

    fn call(&mut self, req: &Request) -> Result<serde_json::Value> {
        match self {
            Target::Local(s) => Ok(s.answer(req)?),
            Target::Remote(c) => Ok(c.call(req)?),
        }
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    let tls = a.auth.tls()?;
    let tokens = crate::security::tokens(a.auth.tokens.as_ref())?;
    let limiter = a.auth.limiter();
    let security = std::sync::Arc::new(inpath_store::guard::Security {
        tls: tls.clone(),
        tokens: tokens.clone(),
        cert_role: a.auth.cert_role()?,
        limiter: limiter.clone(),
    });
    crate::security::check_listener("store serve", &a.listen, security.protection(), a.insecure)?;
    let http_port =
        crate::security::http_port("store serve", &a.web, tls, tokens, limiter, a.insecure)?;
    open(&a.dir, &a.keys)?;
    let ring = match &a.keys.key_file {
        Some(path) => Some(read_keys(path, a.keys.allow_insecure_key_file)?.ring),
        None => None,
    };
    let service = std::sync::Arc::new(Service::new(a.dir.clone(), ring, a.read.reader()));
    let dir = a.dir.display().to_string();
    let mut http = None;
    let protected = security.describe();
    remote::serve(service.clone(), &a.listen, a.max_conns, security, |addr| {
        // The address first, on standard output (port 0 picks one): scripts read it.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr}");
        if let Some((listener, guard)) = http_port {
            let api = inpath_store::live::http_api(service.clone(), addr.to_string());
            let locked = if guard.tokens.is_some() {
                ", token required"
            } else {
                ""
            };
            match inpath_net::HttpServer::start(listener, api, guard) {
                Ok(server) => {
                    let _ = service.guard_counters().http.set(server.counters().clone());
                    let _ = writeln!(out, "http on {}", server.local_addr());
                    eprintln!(
                        "inpath store serve: live page {1}://{0}/ (JSON: /stats, /metrics{locked})",
                        server.local_addr(),
                        server.scheme()
                    );
                    http = Some(server);
                }
                Err(e) => eprintln!("inpath store serve: cannot start the HTTP API: {e}"),
            }
        }
        let _ = out.flush();
        eprintln!(
            "inpath store serve: {dir} on {addr}, {protected} (results only; raw bytes through \
             `read`)"
        );
    })?;
    drop(http);
    Ok(())
}

fn open(dir: &Path, keys: &KeyFile) -> Result<Store> {
    let store = Store::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    Ok(match &keys.key_file {
        Some(_) => store.with_keys(&keys.ring()?),
        None => store,
    })
}

/// The page layout `PageArgs` ask for: page size, seal configuration (None: raw pages) and key.
struct PageLayout {
    page_size: u32,
    seal: Option<SealConfig>,
    key: Option<(u32, Key)>,
}

impl PageLayout {
    fn options(&self) -> PutOptions<'_> {
        PutOptions {
            page_size: self.page_size,
            seal: self
                .seal
                .map(|config| (config, self.key.as_ref().map(|(id, k)| (*id, k)))),
        }
    }
}

fn page_layout(a: &PageArgs) -> Result<PageLayout> {
    let page_size = u32::try_from(a.page_size)
        .ok()
        .filter(|p| (inpath_store::catalog::MIN_PAGE..=inpath_store::catalog::MAX_PAGE).contains(p))
        .with_context(|| {
            format!(
                "--page-size {} is out of range: 512 bytes to 16 MiB",
                a.page_size
            )
        })?;
    let cipher = match &a.seal_tier {
        Some(t) => Some(Cipher::parse(t)?),
        None => None,
    };
    let compression = match &a.compress {
        Some(c) => Some(Compression::parse(c)?),
        None => None,
    };
    let sealed = cipher.is_some() || compression.is_some();
    let (cipher, bits) = cipher.unwrap_or((Cipher::None, 0));
    let key = sealing_key(
        a.keys.key_file.as_deref(),
        a.keys.allow_insecure_key_file,
        a.key_id,
        cipher,
        bits,
        &format!("--seal-tier {}", a.seal_tier.as_deref().unwrap_or_default()),
    )?;
    Ok(PageLayout {
        page_size,
        seal: sealed.then_some(SealConfig {
            compression: compression.unwrap_or(Compression::None),
            cipher,
        }),
        key,
    })
}

fn put_line(entry: &inpath_store::Entry, what: &str) -> String {
    format!(
        "handle {}@{}  {}  {} in {} pages of {}  {}\n",
        entry.handle,
        entry.generation,
        entry.name,
        what,
        thousands(entry.pages()),
        bytes(entry.page_size as u64),
        entry.codec
    )
}

fn put(a: PutArgs) -> Result<()> {
    if a.at.remote {
        return put_remote(a);
    }
    a.at.local_only()?;
    let dir = PathBuf::from(&a.at.store);
    let layout = page_layout(&a.pages)?;
    let mut store =
        Store::create(&dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    let entry = store
        .put_file(&a.file, a.name.as_deref(), &layout.options())
        .with_context(|| format!("cannot put {} into {}", a.file.display(), dir.display()))?;
    if a.json.on {
        print_out(&format!("{}\n", entry_json(&entry)))
    } else {
        print_out(&put_line(&entry, &bytes(entry.size)))
    }
}

/// `put --remote`: the file's bytes go to the server, which pages and seals them with its
/// own keys.
fn put_remote(a: PutArgs) -> Result<()> {
    if a.pages.keys.key_file.is_some() {
        bail!("--key-file is for a local store; a server seals with the keys it was started with");
    }
    let page_size = u32::try_from(a.pages.page_size)
        .with_context(|| format!("--page-size {} is out of range", a.pages.page_size))?;
    let file = std::fs::File::open(&a.file)
        .with_context(|| format!("cannot read {}", a.file.display()))?;
    let length = file
        .metadata()
        .with_context(|| format!("cannot read {}", a.file.display()))?
        .len();
    let name = match &a.name {
        Some(n) => n.clone(),
        None => a
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| a.file.display().to_string()),
    };
    let req = Request::Put {
        name,
        length,
        page_size,
        seal_tier: a.pages.seal_tier.clone(),
        compress: a.pages.compress.clone(),
        key_id: a.pages.key_id,
    };
    let mut client = a.at.connect()?;
    let v = client
        .put(&req, std::io::BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("cannot put {} into {}", a.file.display(), a.at.store))?;
    if a.json.on {
        return print_out(&format!("{v}\n"));
    }
    let num = |k: &str| v[k].as_u64().unwrap_or(0);
    print_out(&format!(
        "handle {}@{}  {}  {} in {} pages of {}  {}\n",
        num("handle"),
        num("generation"),
        v["name"].as_str().unwrap_or(""),
        bytes(num("size")),
        thousands(num("pages")),
        bytes(num("page_size")),
        v["codec"].as_str().unwrap_or("")
    ))
}

fn ls(a: LsArgs) -> Result<()> {
    let list = Target::open(&a.at, &KeyFile::default(), None)?.call(&Request::Ls)?;
    if a.json.on {
        return print_out(&format!("{list}\n"));
    }
    let mut text = format!(
        "{:>8} {:>4} {:>14} {:>10} {:>9}  {:<22} name\n",
        "handle", "gen", "size", "pages", "page", "codec"
    );
    let num = |e: &serde_json::Value, k: &str| e[k].as_u64().unwrap_or(0);
    for e in list.as_array().map(Vec::as_slice).unwrap_or_default() {
        text.push_str(&format!(
            "{:>8} {:>4} {:>14} {:>10} {:>9}  {:<22} {}\n",
            num(e, "handle"),
            num(e, "generation"),
            thousands(num(e, "size")),
            thousands(num(e, "pages")),
            bytes(num(e, "page_size")),
            e["codec"].as_str().unwrap_or(""),
            e["name"].as_str().unwrap_or("")
        ));
    }
    print_out(&text)
}

fn read(a: ReadArgs) -> Result<()> {
    let mut inputs = vec![];
    if let Some(k) = &a.keys.key_file {
        inputs.push(Input::File(k.clone()));
    }
    let req = Request::Read {
        handle: a.handle.clone(),
        offset: a.offset,
        length: a.length,
    };
    match Target::open(&a.at, &a.keys, None)? {
        Target::Local(service) => {
            let (handle, length) = service.read_range(&a.handle, a.offset, a.length)?;
            refuse_terminal(&a.output, length)?;
            let mut out = Output::open(&a.output, &inputs)?;
            service.read_into(&handle, a.offset, length, |b| out.write_all(b))?;
            out.commit()?;
        }
        Target::Remote(mut client) => {
            if let Some(l) = a.length {
                refuse_terminal(&a.output, l)?;
            }
            let mut out = Output::open(&a.output, &inputs)?;
            client.read(&req, |b| out.write_all(b))?;
            out.commit()?;
        }
    }
    Ok(())
}

fn refuse_terminal(output: &str, length: u64) -> Result<()> {
    if output == "-" && std::io::stdout().is_terminal() && length > 4096 {
        bail!("refusing to write {length} bytes to a terminal; use -o FILE or a pipe");
    }
    Ok(())
}

fn rm(a: RmArgs) -> Result<()> {
    let e = Target::open(&a.at, &KeyFile::default(), None)?.call(&Request::Rm {
        handle: a.handle.clone(),
    })?;
    print_out(&format!(
        "removed handle {}@{} ({}, {})\n",
        e["handle"],
        e["generation"],
        e["name"].as_str().unwrap_or(""),
        bytes(e["size"].as_u64().unwrap_or(0))
    ))
}

fn tap(name: &str, a: TapArgs) -> Result<()> {
    let spec = match &a.options {
        Some(o) if !o.trim().is_empty() => format!("{name}:{o}"),
        _ => name.to_string(),
    };
    let req = Request::Tap {
        handle: a.handle.clone(),
        spec,
        threads: a.threads.or(1),
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json.on {
        return print_out(&format!("{v}\n"));
    }
    let r = &v["result"];
    let cost = format!(
        "  {} scanned in {} pages, {} returned; {:.3} s, {:.2} GB/s, {:.2} CPU s per GB\n",
        bytes(v["bytes_scanned"].as_u64().unwrap_or(0)),
        thousands(v["pages_read"].as_u64().unwrap_or(0)),
        bytes(v["bytes_returned"].as_u64().unwrap_or(0)),
        v["seconds"].as_f64().unwrap_or(0.0),
        v["gb_per_second"].as_f64().unwrap_or(0.0),
        v["cpu_seconds_per_gb"].as_f64().unwrap_or(0.0),
    );
    let head = format!("{name} of handle {}@{}", v["handle"], v["generation"]);
    let body = match name {
        "crc" => format!(
            "{head}: {} bytes, crc32 {:08x}\n",
            thousands(r["bytes"].as_u64().unwrap_or(0)),
            r["crc32"].as_u64().unwrap_or(0)
        ),
        "sketch" => {
            let mut t = format!(
                "{head}: {} records\n",
                thousands(r["records"].as_u64().unwrap_or(0))
            );
            for (k, label) in [
                ("cardinality", "distinct (HyperLogLog)"),
                ("f2", "F2 (Fast-AGMS)"),
                ("min", "min"),
                ("max", "max"),
            ] {
                if let Some(x) = r.get(k).filter(|x| !x.is_null()) {
                    t.push_str(&format!("  {label}: {x}\n"));
                }
            }
            t
        }
        _ => format!("{head}:\n{}\n", serde_json::to_string_pretty(r)?),
    };
    print_out(&(body + &cost))
}

fn grep(a: GrepArgs) -> Result<()> {
    let req = Request::Grep {
        handle: a.handle.clone(),
        pattern: a.pattern.clone(),
        regex: a.regex,
        count: a.count,
        threads: a.threads.or(1),
        with_text: !a.count && !a.json.on,
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json.on {
        return print_out(&format!("{v}\n"));
    }
    if a.count {
        return print_out(&format!("{}\n", v["lines"]));
    }
    // OFFSET:MATCH per match, as grep -b -o.
    let offsets = v["offsets"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let texts = v["texts_hex"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (i, off) in offsets.iter().enumerate() {
        write!(out, "{off}:")?;
        match texts.get(i).and_then(|t| t.as_str()) {
            Some(hex) => out.write_all(&from_hex(hex)?)?,
            None => out.write_all(a.pattern.as_bytes())?,
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn nn(a: NnArgs) -> Result<()> {
    let queries = inpath_core::source::read_bounded(
        &a.queries,
        "a queries file (one request)",
        inpath_store::remote::MAX_REQUEST as u64,
    )
    .with_context(|| format!("cannot read queries {}", a.queries.display()))?;
    // Checked here too, so a bad queries file is named before a server is asked.
    Hamming::new(a.item_size, queries.clone(), a.k)
        .with_context(|| format!("queries {}", a.queries.display()))?;
    let req = Request::Nn {
        handle: a.handle.clone(),
        item_size: a.item_size,
        queries_hex: to_hex(&queries),
        k: a.k,
        threads: a.threads.or(1),
        lsh: a.lsh,
        probe: a.probe,
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json.on {
        return print_out(&format!("{v}\n"));
    }
    if let Some(l) = v.get("lsh") {
        let items = v["items"].as_u64().unwrap_or(0).max(1);
        let nq = v["neighbours"].as_array().map_or(1, Vec::len).max(1) as u64;
        let cands = l["candidates"].as_u64().unwrap_or(0);
        eprintln!(
            "lsh: {} candidates verified ({:.3}% of {} items per query), {} read, {} buckets probed",
            thousands(cands),
            cands as f64 / nq as f64 / items as f64 * 100.0,
            thousands(items),
            bytes(l["bytes_read"].as_u64().unwrap_or(0)),
            thousands(l["buckets_probed"].as_u64().unwrap_or(0))
        );
    }
    let mut text = String::new();
    let lists = v["neighbours"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, q) in lists.iter().enumerate() {
        text.push_str(&format!("query {i}:"));
        for n in q.as_array().map(Vec::as_slice).unwrap_or_default() {
            text.push_str(&format!(" {}:{}", n["index"], n["distance"]));
        }
        text.push('\n');
    }
    print_out(&text)
}

fn index(a: IndexArgs) -> Result<()> {
    let req = Request::Index {
        handle: a.handle.clone(),
        item_size: a.item_size,
        tables: a.tables,
        bits: a.bits,
        seed: a.seed,
        threads: a.threads.or(1),
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json.on {
        return print_out(&format!("{v}\n"));
    }
    print_out(&format!(
        "handle {}@{}: LSH index of {} items ({} tables of {} bits), {} in {}\n",
        v["handle"],
        v["generation"],
        thousands(v["items"].as_u64().unwrap_or(0)),
        v["tables"],
        v["bits"],
        bytes(v["index_bytes"].as_u64().unwrap_or(0)),
        v["path"].as_str().unwrap_or("")
    ))
}

fn put_graph(a: PutGraphArgs) -> Result<()> {
    let layout = page_layout(&a.pages)?;
    let (edges, vertices, source) = match (&a.edges, &a.random) {
        (Some(path), _) => {
            let file = std::fs::File::open(path)
                .with_context(|| format!("cannot read edge list {}", path.display()))?;
            let (edges, need) = read_edge_list(std::io::BufReader::new(file), path)?;
            let vertices = a.vertices.unwrap_or(need);
            if vertices < need {
                bail!(
                    "--vertices {vertices} is too small: {} names vertex {}",
                    path.display(),
                    need - 1
                );
            }
            (edges, vertices, path.display().to_string())
        }
        (None, Some(kind)) => {
            let kind = GraphKind::parse(kind)?;
            // clap's requires_all makes both present.
            let (Some(vertices), Some(count)) = (a.vertices, a.edge_count) else {
                bail!("--random needs --vertices and --edge-count");
            };
            let edges = random_edges(kind, vertices, count, a.seed)?;
            (edges, vertices, format!("{} seed {}", kind.name(), a.seed))
        }
        (None, None) => bail!("give --edges FILE or --random KIND"),
    };
    let csr = csr_bytes(vertices, &edges, a.undirected, layout.page_size)
        .with_context(|| format!("cannot make a CSR graph of {source}"))?;
    drop(edges);
    let mut store =
        Store::create(&a.dir).with_context(|| format!("cannot open store {}", a.dir.display()))?;
    let entry = store
        .put_reader(&csr[..], &a.name, &layout.options())
        .with_context(|| format!("cannot put the graph into {}", a.dir.display()))?;
    let m = u64::from_le_bytes(csr[24..32].try_into().expect("a CSR header"));
    if a.json.on {
        let mut v = entry_json(&entry);
        v["vertices"] = vertices.into();
        v["edges"] = m.into();
        v["undirected"] = a.undirected.into();
        return print_out(&format!("{v}\n"));
    }
    let what = format!(
        "CSR graph of {} vertices, {} edges{}, {}",
        thousands(vertices),
        thousands(m),
        if a.undirected { " (undirected)" } else { "" },
        bytes(entry.size)
    );
    print_out(&put_line(&entry, &what))
}

fn bfs(a: BfsArgs) -> Result<()> {
    let threads = a.threads.or(1);
    let req = Request::Bfs {
        handle: a.handle.clone(),
        source: a.source,
        threads,
        arrays: a.arrays || a.levels.is_some(),
    };
    let mut target = Target::open(&a.at, &a.keys, None)?;
    // The levels file may not be the handle's data file (or the key file).
    let mut inputs = vec![];
    if let Target::Local(_) = &target {
        let store = Store::open(Path::new(&a.at.store))?;
        let entry = store.resolve(store.handle_ref(&a.handle)?)?;
        inputs.push(Input::File(
            Path::new(&a.at.store)
                .join("pages")
                .join(entry.data_file_name()),
        ));
    }
    if let Some(k) = &a.keys.key_file {
        inputs.push(Input::File(k.clone()));
    }
    let mut v = target.call(&req)?;
    let list = |v: &serde_json::Value, k: &str| -> Vec<i64> {
        v[k].as_array()
            .map(|a| a.iter().map(|x| x.as_i64().unwrap_or(-1)).collect())
            .unwrap_or_default()
    };
    if let Some(path) = &a.levels {
        let (order, levels, preds) = (
            list(&v, "order"),
            list(&v, "levels"),
            list(&v, "predecessors"),
        );
        let mut out = Output::open(path, &inputs)?;
        let mut text = String::with_capacity(1 << 16);
        for &u in &order {
            use std::fmt::Write as _;
            let i = u as usize;
            let _ = writeln!(text, "{u} {} {}", levels[i], preds[i]);
            if text.len() >= 1 << 16 {
                out.write_all(text.as_bytes())
                    .with_context(|| format!("cannot write {path}"))?;
                text.clear();
            }
        }
        out.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {path}"))?;
        out.commit()?;
        if path == "-" {
            return Ok(());
        }
    }
    if a.json.on {
        if !a.arrays {
            if let Some(o) = v.as_object_mut() {
                for k in ["order", "levels", "predecessors"] {
                    o.remove(k);
                }
            }
        }
        return print_out(&format!("{v}\n"));
    }
    let num = |k: &str| v[k].as_u64().unwrap_or(0);
    let sizes: Vec<String> = list(&v, "level_sizes")
        .iter()
        .map(|&n| thousands(n as u64))
        .collect();
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    print_out(&format!(
        "bfs from vertex {} over handle {} ({} vertices, {} edges): reached {} vertices in {} \
         levels, {} edges traversed\n  level sizes: {}\n  {:.3} s (open {:.3} s, search {:.3} \
         s) on {threads} thread{}: {:.1} M edges/s, {} pages read\n",
        a.source,
        num("handle"),
        thousands(num("vertices")),
        thousands(num("edges")),
        thousands(num("reached")),
        sizes.len(),
        thousands(num("edges_traversed")),
        sizes.join(" "),
        f("seconds"),
        f("open_seconds"),
        f("bfs_seconds"),
        if threads == 1 { "" } else { "s" },
        f("edges_per_second") / 1e6,
        thousands(num("pages_read")),
    ))
}

fn put_chase(a: PutChaseArgs) -> Result<()> {
    let layout = page_layout(&a.layout)?;
    let pages = ChasePages::new(a.pages, layout.page_size, a.seed, a.cycle)?;
    let mut store =
        Store::create(&a.dir).with_context(|| format!("cannot open store {}", a.dir.display()))?;
    let entry = store
        .put_reader(pages, &a.name, &layout.options())
        .with_context(|| format!("cannot put the chase file into {}", a.dir.display()))?;
    if a.json.on {
        let mut v = entry_json(&entry);
        v["start"] = 0.into();
        v["cycle"] = a.cycle.into();
        return print_out(&format!("{v}\n"));
    }
    let what = format!(
        "chase file, {} ({}), starts at page 0",
        bytes(entry.size),
        if a.cycle { "a cycle" } else { "a chain" }
    );
    print_out(&put_line(&entry, &what))
}

fn chase(a: ChaseArgs) -> Result<()> {
    let repeat = a.repeat.max(1);
    if !a.raw {
        let v = Target::open(&a.at, &a.keys, None)?.call(&Request::Chase {
            handle: a.handle.clone(),
            start: a.start,
            hops: a.hops,
            repeat,
        })?;
        if a.json.on {
            return print_out(&format!("{v}\n"));
        }
        let sequence: Vec<u64> = v["sequence"]
            .as_array()
            .map(|s| s.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default();
        let stop = match v["stop"].as_str() {
            Some("end") => Stop::End,
            Some("cycle") => Stop::Cycle {
                page: v["cycle_page"].as_u64().unwrap_or(0),
            },
            _ => Stop::MaxHops,
        };
        return chase_text(
            &a,
            v["handle"].as_u64().unwrap_or(0),
            &sequence,
            stop,
            v["seconds"].as_f64().unwrap_or(0.0),
        );
    }
    if a.at.remote {
        bail!("--raw is the local pread baseline; it does not run against a server");
    }
    a.at.local_only()?;
    let dir = PathBuf::from(&a.at.store);
    let mut runs = Vec::with_capacity(repeat);
    let (entry, sequence, stop) = {
        let store =
            Store::open(&dir).with_context(|| format!("cannot open store {}", dir.display()))?;
        let entry = store.resolve(store.handle_ref(&a.handle)?)?.clone();
        if entry.tier != Tier::Raw {
            bail!(
                "--raw reads raw pages from the data file; handle {} is sealed ({})",
                entry.handle,
                entry.codec
            );
        }
        if a.start >= entry.pages() {
            bail!(
                "--start {} is past the last page of handle {} ({} pages)",
                a.start,
                entry.handle,
                entry.pages()
            );
        }
        let path = dir.join("pages").join(entry.data_file_name());
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let hops = a.hops.unwrap_or(entry.pages());
        let mut last = None;
        for _ in 0..repeat {
            let t = Instant::now();
            let r = chase_pread(&file, &entry, a.start, hops)
                .with_context(|| format!("cannot read {}", path.display()))?;
            runs.push(t.elapsed().as_secs_f64());
            last = Some(r);
        }
        let r = last.context("no run")?;
        (entry, r.sequence, r.stop)
    };
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let seconds = sorted[sorted.len() / 2];
    let hops = sequence.len() as u64;
    if a.json.on {
        let mut v = serde_json::json!({
            "handle": entry.handle,
            "generation": entry.generation,
            "mode": "pread",
            "start": a.start,
            "hops": hops,
            "stop": stop_name(stop),
            "page_size": entry.page_size,
            "seconds": seconds,
            "runs": runs,
            "ns_per_hop": seconds * 1e9 / hops.max(1) as f64,
            "sequence": sequence,
        });
        if let Stop::Cycle { page } = stop {
            v["cycle_page"] = page.into();
        }
        return print_out(&format!("{v}\n"));
    }
    chase_text(&a, entry.handle, &sequence, stop, seconds)
}

fn stop_name(stop: Stop) -> &'static str {
    match stop {
        Stop::End => "end",
        Stop::MaxHops => "max-hops",
        Stop::Cycle { .. } => "cycle",
    }
}

fn chase_text(
    a: &ChaseArgs,
    handle: u64,
    sequence: &[u64],
    stop: Stop,
    seconds: f64,
) -> Result<()> {
    let hops = sequence.len() as u64;
    let per_hop_ns = seconds * 1e9 / hops.max(1) as f64;
    let stop_text = match stop {
        Stop::End => "at the end of the chain".to_string(),
        Stop::MaxHops => "after the hops asked for".to_string(),
        Stop::Cycle { page } => format!("at a cycle back to page {page}"),
    };
    let mut text = format!(
        "chase over handle {handle} from page {}: {} hops, stopped {stop_text}, last page {}; \
         {:.3} ms, {:.0} ns per hop{}\n",
        a.start,
        thousands(hops),
        sequence.last().map_or("-".to_string(), |p| p.to_string()),
        seconds * 1e3,
        per_hop_ns,
        if a.raw { " (plain pread baseline)" } else { "" },
    );
    if a.sequence {
        use std::fmt::Write as _;
        for p in sequence {
            let _ = writeln!(text, "{p}");
        }
    }
    print_out(&text)
}

/// The `inpath demo` section: generated text put into a store as sealed pages (AES-256-GCM),
/// a literal searched beside the pages on two lanes, and the count checked against a plain
/// scan of the original bytes.
pub fn demo_section() -> Result<String> {
    use std::fmt::Write as _;
    let dir = std::env::temp_dir().join(format!("inpath-demo-store-{}", std::process::id()));
    let result = demo_run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let d = result?;
    let mut out = String::new();
    writeln!(
        out,
        "== store (BlueDBM): pages in a store, search kernels beside them, only results leave"
    )?;
    writeln!(
        out,
        "  {} of text put as {} pages of 8 KiB sealed with AES-256-GCM ({} stored) in {:.2} s",
        bytes(d.size),
        thousands(d.pages),
        bytes(d.stored),
        d.put_secs
    )?;
    writeln!(
        out,
        "  \"{}\" searched in the store on 2 lanes: {} matches on {} lines in {:.3} s; a plain scan of the original finds {}: {}",
        String::from_utf8_lossy(DEMO_PATTERN),
        thousands(d.matches),
        thousands(d.lines),
        d.search_secs,
        thousands(d.expected),
        if d.matches == d.expected { "equal" } else { "DIFFERENT" }
    )?;
    writeln!(
        out,
        "  in-store taps on 2 lanes: {} distinct lines (HyperLogLog; the sketch of the original bytes on 1 lane: {}), CRC-32 {:08x} ({}) in {:.3} s",
        thousands(d.distinct.round() as u64),
        if d.distinct == d.distinct_expected { "equal" } else { "DIFFERENT" },
        d.crc,
        if d.crc == d.crc_expected { "equal to the original's" } else { "DIFFERENT from the original's" },
        d.tap_secs
    )?;
    writeln!(
        out,
        "  {} scanned inside the store per kernel, {} returned; try it: inpath store put DIR FILE; inpath store grep DIR 1 WORD; inpath store sketch DIR 1\n",
        bytes(d.size),
        bytes(d.returned)
    )?;
    Ok(out)
}

const DEMO_PATTERN: &[u8] = b"furiously";

struct DemoStore {
    size: u64,
    pages: u64,
    stored: u64,
    put_secs: f64,
    matches: u64,
    lines: u64,
    search_secs: f64,
    expected: u64,
    distinct: f64,
    distinct_expected: f64,
    crc: u32,
    crc_expected: u32,
    tap_secs: f64,
    returned: u64,
}

fn demo_run(dir: &Path) -> Result<DemoStore> {
    let text = inpath_seal::gen::lineitem_text(16 << 20, 7);
    let expected = text
        .windows(DEMO_PATTERN.len())
        .filter(|w| *w == DEMO_PATTERN)
        .count() as u64;
    let key = inpath_seal::Key::new(&inpath_seal::gen::random_bytes(32, 2026))?;
    let mut ring = inpath_seal::KeyRing::new();
    ring.insert(1, key.clone());
    let start = Instant::now();
    let mut store = Store::create(dir)?.with_keys(&ring);
    let options = PutOptions {
        seal: Some((
            SealConfig {
                compression: Compression::None,
                cipher: Cipher::Gcm,
            },
            Some((1, &key)),
        )),
        ..PutOptions::default()
    };
    let entry = store.put_reader(&text[..], "lineitem.txt", &options)?;
    let put_secs = start.elapsed().as_secs_f64();
    let stored = entry.extents.iter().map(|e| u64::from(e.len)).sum::<u64>();
    let reader = FlashReader::new(ReaderConfig::default());
    let handle = store.open_handle(entry.handle.into())?;
    let start = Instant::now();
    let hits = run(&reader, &handle, &Literal::new(DEMO_PATTERN, false)?, 2)?;
    let search_secs = start.elapsed().as_secs_f64();
    // The round-1 taps beside the pages, through the same service `inpath store sketch` and
    // `crc` use; checked against the sketch of the original bytes (exact: same registers).
    let service = Service::new(dir.to_path_buf(), Some(ring), reader);
    let tap = |spec: &str| {
        service.answer(&Request::Tap {
            handle: entry.handle.to_string(),
            spec: spec.into(),
            threads: 2,
        })
    };
    let start = Instant::now();
    let sketch = tap("sketch")?;
    let crc = tap("crc")?;
    let tap_secs = start.elapsed().as_secs_f64();
    let expected_sketch = inpath_taps::parse_tap("sketch")?.run_input(&mut &text[..], 1)?;
    let returned = sketch["bytes_returned"].as_u64().unwrap_or(0)
        + crc["bytes_returned"].as_u64().unwrap_or(0);
    Ok(DemoStore {
        distinct: sketch["result"]["cardinality"].as_f64().unwrap_or(-1.0),
        distinct_expected: expected_sketch["cardinality"].as_f64().unwrap_or(-2.0),
        crc: crc["result"]["crc32"].as_u64().unwrap_or(0) as u32,
        crc_expected: crc32fast::hash(&text),
        tap_secs,
        returned,
        size: entry.size,
        pages: entry.pages(),
        stored,
        put_secs,
        matches: hits.matches,
        lines: hits.lines,
        search_secs,
        expected,
    })
}
