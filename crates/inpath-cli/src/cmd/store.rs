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
use inpath_store::{
    FlashReader, Hamming, HandleRef, Literal, PutOptions, ReaderConfig, RegexSearch, Store, Tier,
};
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
}

/// Options every verb that reads pages shares.
#[derive(Args)]
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
    /// Store directory.
    dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ReadArgs {
    /// Store directory.
    dir: PathBuf,
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
    /// Store directory.
    dir: PathBuf,
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
    /// Read workers (pread), each with up to 32 reads queued.
    #[arg(long, default_value_t = 4)]
    readers: usize,
    #[command(flatten)]
    keys: KeyArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct NnArgs {
    /// Store directory.
    dir: PathBuf,
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

fn entry_json(e: &inpath_store::Entry) -> serde_json::Value {
    serde_json::json!({
        "handle": e.handle,
        "generation": e.generation,
        "name": e.name,
        "size": e.size,
        "page_size": e.page_size,
        "pages": e.pages(),
        "tier": match e.tier { Tier::Raw => "raw", Tier::Sealed => "sealed" },
        "codec": e.codec,
        "stored_bytes": e.stored_bytes(),
    })
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
    let store =
        Store::open(&a.dir).with_context(|| format!("cannot open store {}", a.dir.display()))?;
    if a.json {
        let list: Vec<_> = store.entries().iter().map(entry_json).collect();
        return print_out(&format!("{}\n", serde_json::Value::Array(list)));
    }
    let mut text = format!(
        "{:>8} {:>4} {:>14} {:>10} {:>9}  {:<22} name\n",
        "handle", "gen", "size", "pages", "page", "codec"
    );
    for e in store.entries() {
        text.push_str(&format!(
            "{:>8} {:>4} {:>14} {:>10} {:>9}  {:<22} {}\n",
            e.handle,
            e.generation,
            thousands(e.size),
            thousands(e.pages()),
            bytes(e.page_size as u64),
            e.codec,
            e.name
        ));
    }
    print_out(&text)
}

fn read(a: ReadArgs) -> Result<()> {
    let store = open(&a.dir, &a.keys)?;
    let h = handle_ref(&a.handle)?;
    let handle = store.open_handle(h)?;
    let size = handle.entry().size;
    let length = match a.length {
        Some(l) => l,
        None => size
            .checked_sub(a.offset)
            .ok_or(inpath_store::StoreError::RangePastEnd {
                handle: h.id,
                offset: a.offset,
                length: 0,
                size,
            })?,
    };
    handle.check_range(a.offset, length)?;
    if a.output == "-" && std::io::stdout().is_terminal() && length > 4096 {
        bail!("refusing to write {length} bytes to a terminal; use -o FILE or a pipe");
    }
    let mut inputs = vec![];
    if let Some(k) = &a.keys.key_file {
        inputs.push(Input::File(k.clone()));
    }
    let mut out = Output::open(&a.output, &inputs)?;
    let reader = FlashReader::new(ReaderConfig::default());
    for chunk in reader.request(&handle, a.offset, length)? {
        let chunk = chunk?;
        out.write_all(chunk.bytes())
            .with_context(|| format!("cannot write {}", a.output))?;
    }
    out.commit()?;
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
    if a.pattern.is_empty() {
        bail!("the pattern is empty");
    }
    if !a.regex && a.pattern.contains('\n') {
        bail!("the literal pattern holds a newline; search for one line at a time");
    }
    let store = open(&a.dir, &a.keys)?;
    let handle = store.open_handle(handle_ref(&a.handle)?)?;
    let reader = FlashReader::new(ReaderConfig {
        workers: a.readers.max(1),
        depth: 32,
        jitter: None,
    });
    let threads = a.threads.max(1);
    let want_offsets = !a.count;
    let start = Instant::now();
    let (kind, lines, matches, offsets, lengths) = if a.regex {
        let k = RegexSearch::new(&a.pattern, want_offsets)?;
        let h = run(&reader, &handle, &k, threads)?;
        ("regex", h.lines, h.matches, h.offsets, h.lengths)
    } else {
        let k = Literal::new(a.pattern.as_bytes(), want_offsets)?;
        let h = run(&reader, &handle, &k, threads)?;
        let n = h.offsets.len();
        (
            "literal",
            h.lines,
            h.matches,
            h.offsets,
            vec![a.pattern.len() as u64; n],
        )
    };
    let seconds = start.elapsed().as_secs_f64();
    let size = handle.entry().size;
    if a.json {
        let mut v = serde_json::json!({
            "handle": handle.entry().handle,
            "generation": handle.entry().generation,
            "pattern": a.pattern,
            "kind": kind,
            "lines": lines,
            "threads": threads,
            "bytes_scanned": size,
            "seconds": seconds,
        });
        if want_offsets {
            v["matches"] = matches.into();
            v["offsets"] = offsets.into();
        }
        return print_out(&format!("{v}\n"));
    }
    if a.count {
        return print_out(&format!("{lines}\n"));
    }
    // OFFSET:MATCH per match, as grep -b -o; the match bytes are read back from the store.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (off, len) in offsets.iter().zip(&lengths) {
        let text = if a.regex {
            handle.read(*off, *len)?
        } else {
            a.pattern.as_bytes().to_vec()
        };
        write!(out, "{off}:")?;
        out.write_all(&text)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn nn(a: NnArgs) -> Result<()> {
    let store = open(&a.dir, &a.keys)?;
    let handle = store.open_handle(handle_ref(&a.handle)?)?;
    let queries = std::fs::read(&a.queries)
        .with_context(|| format!("cannot read queries {}", a.queries.display()))?;
    let kernel = Hamming::new(a.item_size, queries, a.k)
        .with_context(|| format!("queries {}", a.queries.display()))?;
    kernel.check_size(handle.entry().size)?;
    let reader = FlashReader::new(ReaderConfig::default());
    let result = run(&reader, &handle, &kernel, a.threads.max(1))?;
    if a.json {
        let v = serde_json::json!({
            "handle": handle.entry().handle,
            "item_size": a.item_size,
            "items": handle.entry().size / a.item_size as u64,
            "k": a.k,
            "neighbours": result.queries.iter().map(|q| {
                q.iter().map(|n| serde_json::json!({"index": n.index, "distance": n.distance}))
                    .collect::<Vec<_>>()
            }).collect::<Vec<_>>(),
        });
        return print_out(&format!("{v}\n"));
    }
    let mut text = String::new();
    for (i, q) in result.queries.iter().enumerate() {
        text.push_str(&format!("query {i}:"));
        for n in q {
            text.push_str(&format!(" {}:{}", n.index, n.distance));
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
