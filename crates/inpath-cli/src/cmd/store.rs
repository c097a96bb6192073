//! `inpath store`: BlueDBM's in-store processing. A directory of pages with a catalog of
//! handles; kernels (literal and regex search, Hamming nearest neighbours) run beside the pages
//! and print results, not bytes. docs/store.md.

use crate::cmd::seal::{read_keys, sealing_key};
use crate::common::{bytes, parse_size, print_out, thousands};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use inpath_core::output::Output;
use inpath_core::Input;
use inpath_seal::{Cipher, Compression, SealConfig};
use inpath_store::kernel::run;
use inpath_store::remote::{self, entry_json, from_hex, to_hex, Client, Request, Service};
use inpath_store::{FlashReader, Hamming, HandleRef, Literal, PutOptions, ReaderConfig, Store};
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
    #[command(after_help = "Example:
  inpath store nn /srv/store 4 --item-size 32 --queries q.bin -k 10 --json")]
    Nn(NnArgs),
    /// Serve a store over TCP: kernel requests answered with results only (`--remote ADDR`
    /// on ls, read, grep and nn).
    #[command(after_help = "Examples:
  inpath store serve /srv/store --listen 127.0.0.1:7420 --key-file keys.txt
  inpath store grep --remote 127.0.0.1:7420 3 needle --count
  inpath store ls --remote 127.0.0.1:7420 --json

The server owns the directory and the keys; clients send requests and get results (counts,
offsets, neighbours) and, only through `read`, raw bytes. It prints `listening on ADDR` once
bound (port 0 picks a free port) and runs until stopped. Protocol: docs/FORMATS.md.")]
    Serve(ServeArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// Store directory.
    dir: PathBuf,
    /// Address to listen on (HOST:PORT; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: String,
    /// Most connections served at once.
    #[arg(long, default_value_t = 64)]
    max_conns: usize,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyArgs,
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
}

/// Options every verb that reads pages shares.
#[derive(Args, Default)]
struct KeyArgs {
    /// Key file for sealed pages (see `inpath seal keygen`); must be chmod 600.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Use a key file even when group or others can read it (not recommended).
    #[arg(long)]
    allow_insecure_key_file: bool,
}

#[derive(Args)]
struct PutArgs {
    /// Store directory (created with an empty catalog when missing).
    dir: PathBuf,
    /// File to store.
    file: PathBuf,
    /// Name in the catalog (default: the file's name).
    #[arg(long)]
    name: Option<String>,
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
    keys: KeyArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct LsArgs {
    #[command(flatten)]
    at: Location,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReadArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID, or ID@GENERATION to refuse a replaced file.
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
    keys: KeyArgs,
}

#[derive(Args)]
struct RmArgs {
    /// Store directory.
    dir: PathBuf,
    /// Handle: ID or ID@GENERATION.
    handle: String,
}

#[derive(Args)]
struct GrepArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID or ID@GENERATION.
    handle: String,
    /// Pattern: a literal byte string, or with --regex a regular expression (Rust regex syntax).
    pattern: String,
    /// The pattern is a regular expression, matched line by line.
    #[arg(long)]
    regex: bool,
    /// Print only the number of lines with a match (as grep -c).
    #[arg(short, long)]
    count: bool,
    /// Lanes (threads), each scanning a contiguous range of pages.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyArgs,
    /// Print JSON (with the counters: bytes scanned and returned, pages read, CPU per GB).
    #[arg(long)]
    json: bool,
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
    /// Read workers (pread), with up to 32 reads queued.
    #[arg(long, default_value_t = 4)]
    readers: usize,
    /// The most bytes one worker read fetches (whole pages stored back to back).
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    read_size: u64,
}

impl ReadPathArgs {
    fn reader(&self) -> FlashReader {
        FlashReader::new(ReaderConfig {
            workers: self.readers.max(1),
            segment: self.read_size,
            direct: self.direct,
            mapped: !self.no_map,
            ..ReaderConfig::default()
        })
    }
}

#[derive(Args)]
struct NnArgs {
    #[command(flatten)]
    at: Location,
    /// Handle: ID or ID@GENERATION.
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
    /// Lanes (threads).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[command(flatten)]
    read: ReadPathArgs,
    #[command(flatten)]
    keys: KeyArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
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
        Action::Serve(a) => serve(a),
    }
}

/// A local store (a service over the directory) or a connection to a server.
enum Target {
    Local(Box<Service>),
    Remote(Client),
}

impl Target {
    fn open(at: &Location, keys: &KeyArgs, read: Option<&ReadPathArgs>) -> Result<Target> {
        if at.remote {
            if keys.key_file.is_some() {
                bail!(
                    "--key-file is for a local store; a server uses the keys it was started with"
                );
            }
            return Ok(Target::Remote(Client::connect(&at.store)?));
        }
        let dir = PathBuf::from(&at.store);
        // Opened here so a bad directory or key file is reported before any work.
        open(&dir, keys)?;
        let ring = match &keys.key_file {
            Some(path) => Some(read_keys(path, keys.allow_insecure_key_file)?.ring),
            None => None,
        };
        let reader = match read {
            Some(r) => r.reader(),
            None => FlashReader::new(ReaderConfig::default()),
        };
        Ok(Target::Local(Box::new(Service::new(dir, ring, reader))))
    }

    fn call(&mut self, req: &Request) -> Result<serde_json::Value> {
        match self {
            Target::Local(s) => Ok(s.answer(req)?),
            Target::Remote(c) => Ok(c.call(req)?),
        }
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    open(&a.dir, &a.keys)?;
    let ring = match &a.keys.key_file {
        Some(path) => Some(read_keys(path, a.keys.allow_insecure_key_file)?.ring),
        None => None,
    };
    let service = Service::new(a.dir.clone(), ring, a.read.reader());
    let dir = a.dir.display().to_string();
    remote::serve(service, &a.listen, a.max_conns.max(1), |addr| {
        // The address first, on standard output (port 0 picks one): scripts read it.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
        eprintln!("inpath store serve: {dir} on {addr} (results only; raw bytes through `read`)");
    })?;
    Ok(())
}

impl KeyArgs {
    fn none() -> KeyArgs {
        KeyArgs::default()
    }
}

fn open(dir: &Path, keys: &KeyArgs) -> Result<Store> {
    let store = Store::open(dir).with_context(|| format!("cannot open store {}", dir.display()))?;
    Ok(match &keys.key_file {
        Some(path) => store.with_keys(&read_keys(path, keys.allow_insecure_key_file)?.ring),
        None => store,
    })
}

fn handle_ref(text: &str) -> Result<HandleRef> {
    Ok(HandleRef::parse(text)?)
}

fn put(a: PutArgs) -> Result<()> {
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
    let options = PutOptions {
        page_size,
        seal: sealed.then_some((
            SealConfig {
                compression: compression.unwrap_or(Compression::None),
                cipher,
            },
            key.as_ref().map(|(id, k)| (*id, k)),
        )),
    };
    let mut store =
        Store::create(&a.dir).with_context(|| format!("cannot open store {}", a.dir.display()))?;
    let entry = store
        .put_file(&a.file, a.name.as_deref(), &options)
        .with_context(|| format!("cannot put {} into {}", a.file.display(), a.dir.display()))?;
    if a.json {
        print_out(&format!("{}\n", entry_json(&entry)))
    } else {
        print_out(&format!(
            "handle {}@{}  {}  {} in {} pages of {}  {}\n",
            entry.handle,
            entry.generation,
            entry.name,
            bytes(entry.size),
            thousands(entry.pages()),
            bytes(entry.page_size as u64),
            entry.codec
        ))
    }
}

fn ls(a: LsArgs) -> Result<()> {
    let list = Target::open(&a.at, &KeyArgs::none(), None)?.call(&Request::Ls)?;
    if a.json {
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
    let mut store =
        Store::open(&a.dir).with_context(|| format!("cannot open store {}", a.dir.display()))?;
    let e = store.remove(handle_ref(&a.handle)?)?;
    print_out(&format!(
        "removed handle {}@{} ({}, {})\n",
        e.handle,
        e.generation,
        e.name,
        bytes(e.size)
    ))
}

fn grep(a: GrepArgs) -> Result<()> {
    let req = Request::Grep {
        handle: a.handle.clone(),
        pattern: a.pattern.clone(),
        regex: a.regex,
        count: a.count,
        threads: a.threads.max(1),
        with_text: !a.count && !a.json,
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json {
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
    let queries = std::fs::read(&a.queries)
        .with_context(|| format!("cannot read queries {}", a.queries.display()))?;
    // Checked here too, so a bad queries file is named before a server is asked.
    Hamming::new(a.item_size, queries.clone(), a.k)
        .with_context(|| format!("queries {}", a.queries.display()))?;
    let req = Request::Nn {
        handle: a.handle.clone(),
        item_size: a.item_size,
        queries_hex: to_hex(&queries),
        k: a.k,
        threads: a.threads.max(1),
    };
    let v = Target::open(&a.at, &a.keys, Some(&a.read))?.call(&req)?;
    if a.json {
        return print_out(&format!("{v}\n"));
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
        "  {} scanned inside the store, one count returned; try it: inpath store put DIR FILE; inpath store grep DIR 1 WORD\n",
        bytes(d.size)
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
    Ok(DemoStore {
        size: entry.size,
        pages: entry.pages(),
        stored,
        put_secs,
        matches: hits.matches,
        lines: hits.lines,
        search_secs: start.elapsed().as_secs_f64(),
        expected,
    })
}
