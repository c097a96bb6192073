//! `inpath query gen|import|sql|tpch|inspect`: TPC-H generation and Parquet/CSV import into
//! column tables of sealed pages, SQL over them (DataFusion with our scan underneath), the 22
//! TPC-H queries checked against pinned answers, and a look inside tables (see
//! `docs/query.md`, `docs/FORMATS.md`, "Column tables (inpath-table)").
use super::query_session::{default_threads, key_hint, open_session, spill_dir, OffloadArgs};
use crate::cmd::seal::sealing_key;
use crate::common::KeyFile;
use crate::common::{bytes, print_out, thousands};
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use inpath_seal::{Cipher, Compression, KeyRing, SealConfig};
use inpath_table::{GenOptions, TableReader, WriteOptions};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `inpath query`.
#[derive(Args)]
pub struct QueryArgs {
    #[command(subcommand)]
    command: QueryCommand,
}

#[derive(Subcommand)]
enum QueryCommand {
    /// Generate the eight TPC-H tables (tpchgen) as column tables under DIR.
    Gen(GenArgs),
    /// Import a Parquet or CSV file (header row) as a column table DIR/NAME.
    Import(ImportArgs),
    /// Run a SQL statement over the tables in DIR (each table by its directory name).
    Sql(SqlArgs),
    /// Run the 22 TPC-H queries (or some) over DIR, timed, optionally checked against the
    /// pinned answers.
    Tpch(TpchArgs),
    /// Show a table's schema, rows, pages, encodings, widths and bytes (DIR is a table or a
    /// directory of tables).
    Inspect(InspectArgs),
    /// Show what offload makes of the TPC-H queries (or a statement): each query's class
    /// (full, partial, host), its Table Task graphs, and why anything stays on the host.
    Explain(ExplainArgs),
    /// Serve the tables in DIR over Arrow Flight SQL to clients on other machines (ADBC,
    /// pyarrow, JDBC, the Spark connector), with offload on this side.
    Serve(super::query_serve::ServeArgs),
    /// Divide the tables in DIR by page ranges into one directory per node (to serve a table
    /// from several servers).
    Split(super::query_serve::SplitArgs),
    /// Serve offload Table Tasks over standard input and output: the device's side of
    /// `--offload --device process`, which starts it (not run by hand).
    ServeDevice(ServeDeviceArgs),
}

/// Arguments of `inpath query serve-device`.
#[derive(Args)]
struct ServeDeviceArgs {
    /// Directory holding the tables (the host's session's DIR).
    dir: PathBuf,
    #[command(flatten)]
    keys: KeyFile,
    /// Device lanes (threads).
    #[arg(long, default_value_t = default_threads(), value_parser = crate::common::parse_threads)]
    lanes: usize,
    /// Device memory, such as 40MiB.
    #[arg(long, value_parser = crate::common::parse_size, default_value = "40MiB")]
    memory: u64,
    /// Where the device spills (see `query sql --spill-dir`).
    #[arg(long, value_parser = spill_dir)]
    spill_dir: Option<PathBuf>,
}

fn serve_device(args: ServeDeviceArgs) -> anyhow::Result<()> {
    if std::io::stdin().is_terminal() || std::io::stdout().is_terminal() {
        bail!(
            "serve-device speaks a binary protocol on its standard input and output; \
             `inpath query tpch|sql|explain --offload --device process` starts it"
        );
    }
    let ring = args.keys.ring()?;
    let device = inpath_offload::LocalDevice::open(&args.dir, &ring, args.lanes, args.memory)
        .map_err(|e| key_hint(&args.keys, e))?
        .with_spill_dir(args.spill_dir);
    inpath_offload::serve(device, std::io::stdin().lock(), std::io::stdout())?;
    Ok(())
}

/// Arguments of `inpath query explain`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query explain --offload tpch\n  \
    inpath query explain --offload tpch --queries 1,6 --graphs\n  \
    inpath query explain --offload --fidelity thesis --device-memory 40MiB tpch --json\n  \
    inpath query explain --offload tpch --sql \"SELECT sum(l_quantity) FROM lineitem\"")]
#[command(mut_arg("threads", |a| a.help("Threads (and scan partitions) of the plans [default: the number of CPUs]")))]
struct ExplainArgs {
    /// Directory holding the tables.
    dir: PathBuf,
    /// TPC-H queries to explain, such as 1,6,14 or 1-5 (default: all 22).
    #[arg(long, conflicts_with = "sql")]
    queries: Option<String>,
    /// Explain this statement instead of TPC-H queries (it may begin with a `--` comment; `-`
    /// reads it from standard input).
    #[arg(long, allow_hyphen_values = true)]
    sql: Option<String>,
    /// Print each query's Table Task graphs (JSON) and plan.
    #[arg(long)]
    graphs: bool,
    #[command(flatten)]
    offload: OffloadArgs,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    json: crate::common::Json,
}

/// How `gen` and `import` write tables: the sealing tier, its key, rows per page.
#[derive(Args)]
#[command(mut_arg("key_file", |a| a.help("Key file (see `inpath seal keygen`); required with a cipher. Must be private (chmod 600)")))]
struct WriteTableArgs {
    /// Sealing tier: `plain`, a codec (`lz4`, `zstd[-N]`, `deflate[-N]`, `snappy`), a cipher
    /// (`aes256-gcm`, `aes{128,192,256}-{ctr,cbc,ecb}`), or CODEC+CIPHER (`lz4+aes256-gcm`).
    /// The codec compresses string heaps and the manifest; every page gets the cipher.
    #[arg(long, default_value = "plain")]
    tier: String,
    #[command(flatten)]
    keys: KeyFile,
    /// Key id to seal with (default: the first key in the file).
    #[arg(long)]
    key_id: Option<u32>,
    /// Rows per page.
    #[arg(long, default_value_t = inpath_table::format::DEFAULT_ROWS_PER_PAGE)]
    rows_per_page: usize,
}

impl WriteTableArgs {
    /// The write options (the key read and checked against the cipher) and the tier.
    fn options(
        &self,
        overwrite: bool,
        threads: usize,
    ) -> anyhow::Result<(WriteOptions, SealConfig)> {
        let (seal, bits) = parse_tier(&self.tier)?;
        let key = sealing_key(
            self.keys.key_file.as_deref(),
            self.keys.allow_insecure_key_file,
            self.key_id,
            seal.cipher,
            bits,
            &format!("--tier {}", self.tier),
        )?;
        let options = WriteOptions {
            rows_per_page: self.rows_per_page,
            seal,
            key,
            overwrite,
            threads,
            ..WriteOptions::default()
        };
        Ok((options, seal))
    }
}

/// Arguments of `inpath query import`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query import trips.parquet db\n  \
    inpath query import --table people people.csv db --tier lz4+aes256-gcm --key-file keys.txt\n  \
    inpath query sql db \"SELECT count(*) FROM trips\"")]
#[command(mut_arg("threads", |a| a.help("Threads for encoding and sealing [default: 1]")))]
#[command(mut_arg("json", |a| a.help("Print the summary as JSON")))]
struct ImportArgs {
    /// The file to import: .parquet, or .csv with a header row (types inferred).
    file: PathBuf,
    /// Directory of tables to write into; the table goes to DIR/NAME.
    dir: PathBuf,
    /// The table's name (default: the file's name without its extension).
    #[arg(long)]
    table: Option<String>,
    #[command(flatten)]
    write: WriteTableArgs,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Replace the table if it exists.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Arguments of `inpath query sql`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query sql tpch \"SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1 ORDER BY 1\"\n  \
    inpath query sql tpch-sealed --key-file keys.txt --json \"SELECT * FROM nation LIMIT 3\"\n  \
    inpath query sql tpch -o big-orders.parquet \"SELECT * FROM orders WHERE o_totalprice > 500000\"\n  \
    inpath query sql tpch --explain \"SELECT sum(l_quantity) FROM lineitem WHERE l_shipdate < date '1993-01-01'\"\n  \
    inpath query sql tpch -f q1.sql            # the statement from a file (comments and all)\n  \
    inpath query sql tpch - < q1.sql           # ... or from standard input")]
#[command(mut_arg("threads", |a| a.help("Threads (and scan partitions) [default: the number of CPUs]")))]
#[command(mut_arg("json", |a| a.help("Print the rows as JSON (an array of objects)").conflicts_with_all(["csv", "output"])))]
struct SqlArgs {
    /// A table directory, or a directory of table directories (tables by directory name).
    dir: PathBuf,
    /// The statement (it may begin with a `--` comment), or `-` to read it from standard input.
    #[arg(
        allow_hyphen_values = true,
        required_unless_present = "file",
        conflicts_with = "file"
    )]
    statement: Option<String>,
    /// Read the statement from this file (`-`: standard input).
    #[arg(short = 'f', long, value_name = "FILE")]
    file: Option<PathBuf>,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    json: crate::common::Json,
    /// Print the rows as CSV with a header row.
    #[arg(long, conflicts_with = "output")]
    csv: bool,
    /// Write the rows to this Parquet file instead (written aside, renamed on success).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Print the physical plan instead of running the statement.
    #[arg(long)]
    explain: bool,
    /// Print what the scans did (pages pruned, unselected, read; bytes) on standard error.
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    offload: OffloadArgs,
}

/// Arguments of `inpath query tpch`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query gen --sf 0.01 tpch && inpath query tpch tpch --check\n  \
    inpath query tpch tpch --queries 1,6,14 --threads 2 --json\n  \
    .venv/bin/python crates/inpath-query/tpch/pin_answers.py --sf 1 --out ans-sf1\n  \
    inpath query tpch tpch-sf1 --check --answers ans-sf1")]
#[command(mut_arg("threads", |a| a.help("Threads (and scan partitions) [default: the number of CPUs]")))]
struct TpchArgs {
    /// Directory holding the eight TPC-H tables (from `inpath query gen`).
    dir: PathBuf,
    /// Queries to run, such as 1,6,14 or 1-5 (default: all 22).
    #[arg(long)]
    queries: Option<String>,
    /// Compare every result with the pinned answers (shipped for SF 0.01; other scale factors
    /// through --answers); exits non-zero on any difference.
    #[arg(long)]
    check: bool,
    /// Directory of answers (qNN.csv from tpch/pin_answers.py) to check against.
    #[arg(long)]
    answers: Option<PathBuf>,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Runs of each query; the median time is reported (the first run also warms the cache).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[command(flatten)]
    json: crate::common::Json,
    /// DIR holds TPC-H Parquet files (NAME.parquet, as tpchgen-cli writes them) instead of
    /// column tables: the same DataFusion, the same settings, over Parquet (the benchmark's
    /// peer).
    #[arg(long, conflicts_with = "offload")]
    parquet: bool,
    #[command(flatten)]
    offload: OffloadArgs,
}

/// Arguments of `inpath query gen`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query gen --sf 1 tpch\n  \
    inpath seal keygen -o keys.txt\n  \
    inpath query gen --sf 1 --tier lz4+aes256-gcm --key-file keys.txt tpch-sealed --threads 2\n  \
    inpath query inspect tpch-sealed --key-file keys.txt")]
#[command(mut_arg("threads", |a| a.help("Threads for generation and for encoding and sealing [default: 1]")))]
#[command(mut_arg("json", |a| a.help("Print the summary as JSON")))]
struct GenArgs {
    /// Directory to write the tables into (DIR/lineitem, DIR/orders, ...).
    dir: PathBuf,
    /// TPC-H scale factor (1 = about 1 GB of text, 6 million lineitem rows).
    #[arg(long)]
    sf: f64,
    #[command(flatten)]
    write: WriteTableArgs,
    #[command(flatten)]
    threads: crate::common::Threads,
    /// Replace tables that already exist in DIR (only directories that are tables).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    json: crate::common::Json,
    /// No progress and no summary.
    #[arg(short, long)]
    quiet: bool,
}

/// Arguments of `inpath query inspect`.
#[derive(Args)]
struct InspectArgs {
    /// A table directory, or a directory of table directories.
    dir: PathBuf,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Runs `inpath query ...`.
pub fn run(args: QueryArgs) -> anyhow::Result<()> {
    match args.command {
        QueryCommand::Gen(a) => gen(a),
        QueryCommand::Import(a) => import(a),
        QueryCommand::Sql(a) => sql(a),
        QueryCommand::Tpch(a) => tpch(a),
        QueryCommand::Inspect(a) => inspect(a),
        QueryCommand::Explain(a) => explain(a),
        QueryCommand::Serve(a) => super::query_serve::serve(a),
        QueryCommand::Split(a) => super::query_serve::split(a),
        QueryCommand::ServeDevice(a) => serve_device(a),
    }
}

fn import(args: ImportArgs) -> anyhow::Result<()> {
    let (options, seal) = args.write.options(args.force, args.threads.or(1))?;
    let name = match &args.table {
        Some(t) => t.clone(),
        None => args
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .with_context(|| format!("{} has no file name", args.file.display()))?,
    };
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        bail!("table name {name:?} is not valid: a non-empty name without '/' that does not start with '.'");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let target = args.dir.join(&name);
    let start = Instant::now();
    let s = inpath_table::import_file(&args.file, &target, options)?;
    let secs = start.elapsed().as_secs_f64();
    if args.json.on {
        let value = serde_json::json!({
            "file": args.file.display().to_string(),
            "table": name,
            "dir": target.display().to_string(),
            "tier": seal_name(seal),
            "rows": s.rows,
            "pages": s.pages,
            "bytes": s.bytes,
            "seconds": secs,
        });
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    print_out(&format!(
        "imported {} as table {name} in {}: {} rows, {} pages, {} ({} pages), {secs:.2} s\n",
        args.file.display(),
        target.display(),
        thousands(s.rows),
        s.pages,
        bytes(s.bytes),
        seal_name(seal)
    ))
}

fn device_line(s: &inpath_offload::DeviceStats) -> String {
    format!(
        "device: {} graphs; pages {} read, {} skipped; {} read, {} sent to the host; {} rows selected; {:.3} s CPU; peak memory {}; {} groups spilled, {} cut by TOPK",
        s.graphs,
        thousands(s.pages_read),
        thousands(s.pages_skipped),
        bytes(s.bytes_read),
        bytes(s.bytes_sent),
        thousands(s.rows_selected),
        s.cpu_seconds,
        bytes(s.peak_memory),
        thousands(s.groups_spilled),
        thousands(s.groups_cut)
    ) + &if s.graphs_partitioned > 0 {
        format!(
            "; {} graphs in {} key-range passes, {} spilled",
            s.graphs_partitioned,
            s.passes,
            bytes(s.spill_bytes)
        )
    } else {
        String::new()
    } + &if s.process_peak_rss > 0 {
        format!("; device process peak RSS {}", bytes(s.process_peak_rss))
    } else {
        String::new()
    }
}

fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    if !args.offload.offload {
        bail!("query explain shows what offload does: pass --offload (with --device-memory and --fidelity as wanted); `query sql --explain` prints a plain plan");
    }
    let session = open_session(
        &args.dir,
        &args.keys,
        args.threads.or(default_threads()),
        &args.offload,
    )?;
    let statements: Vec<(String, String)> = match (&args.sql, &args.queries) {
        (Some(sql), _) => vec![("sql".to_string(), statement(Some(sql), None)?)],
        (None, q) => {
            let queries = match q {
                Some(q) => parse_queries(q)?,
                None => (1..=22).collect(),
            };
            queries
                .into_iter()
                .map(|n| {
                    (
                        format!("Q{n}"),
                        inpath_query::tpch_queries::query(n)
                            .expect("1..=22")
                            .to_string(),
                    )
                })
                .collect()
        }
    };
    let mut text = format!(
        "device memory {}, fidelity {}\nquery   class    tasks  notes\n",
        bytes(session.device_memory().unwrap_or(0)),
        args.offload.fidelity
    );
    let mut rows = Vec::new();
    let mut counts = [0usize; 3];
    for (name, sql) in &statements {
        let e = session.explain_offload(sql).with_context(|| name.clone())?;
        counts[match e.class {
            "full" => 0,
            "partial" => 1,
            _ => 2,
        }] += 1;
        let mut notes: Vec<String> = Vec::new();
        for d in &e.decisions {
            match (&d.declined, &d.table) {
                (Some(why), Some(table)) => {
                    notes.push(format!("{} over {table}: host ({why})", d.what))
                }
                (Some(why), None) => notes.push(format!("{}: host ({why})", d.what)),
                (None, table) => notes.push(format!(
                    "{} over {}: device",
                    d.what,
                    table.as_deref().unwrap_or("?")
                )),
            }
            if !d.limits_hit.is_empty() && d.declined.is_none() {
                notes.push(format!("thesis limits hit: {}", d.limits_hit.join(", ")));
            }
        }
        if e.host_scans > 0 {
            notes.push(format!("{} scans on the host", e.host_scans));
        }
        if !e.reductions.is_empty() {
            notes.push(format!("semi-join reductions: {}", e.reductions.join(", ")));
        }
        for p in e.passes.iter().flatten() {
            let restricting = match p.restricts.is_empty() {
                true => String::new(),
                false => format!(", restricting {}", p.restricts.join(", ")),
            };
            notes.push(match p.passes_at_most {
                1 => format!(
                    "builds hold at most {} of {}; beyond it, key-range passes over {}{restricting}",
                    bytes(p.held_at_most),
                    bytes(p.memory),
                    p.key
                ),
                n => format!(
                    "builds may hold up to {} of {} (zone maps; filters keep fewer): if they outgrow it, up to {n} key-range passes over {}{restricting}",
                    bytes(p.held_at_most),
                    bytes(p.memory),
                    p.key
                ),
            });
        }
        text.push_str(&format!(
            "{name:<7} {:<8} {:>5}  {}\n",
            e.class,
            e.graphs.len(),
            notes.join("; ")
        ));
        if args.graphs && !args.json.on {
            for (g, d) in e.graphs.iter().zip(&e.device_graphs) {
                text.push_str(&format!("{}\n", g.to_json()));
                if d != g {
                    text.push_str(&format!("as the device runs it: {}\n", d.to_json()));
                }
            }
            text.push_str(&format!("{}\n", e.plan.trim_end()));
        }
        rows.push(serde_json::json!({
            "query": name,
            "class": e.class,
            "graphs": e.graphs,
            "host_scans": e.host_scans,
            "passes": e.passes,
            "device_graphs": e.device_graphs,
            "reductions": e.reductions,
            "decisions": e.decisions.iter().map(|d| serde_json::json!({
                "what": d.what,
                "table": d.table,
                "offloaded": d.declined.is_none(),
                "declined": d.declined.as_ref().map(|r| r.to_string()),
                "reason": d.declined.as_ref().map(|r| r.to_json()),
                "thesis_limits_hit": d.limits_hit,
            })).collect::<Vec<_>>(),
            "plan": args.graphs.then_some(e.plan.clone()),
        }));
    }
    text.push_str(&format!(
        "{} full, {} partial, {} host\n",
        counts[0], counts[1], counts[2]
    ));
    if args.json.on {
        let value = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "device_memory": session.device_memory(),
            "fidelity": args.offload.fidelity,
            "queries": rows,
        });
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    print_out(&text)
}

fn stats_line(s: &inpath_query::ScanStats) -> String {
    format!(
        "pages: {} of {} pruned by zone maps, {} unselected; {} page records read ({}); rows {} scanned, {} out",
        thousands(s.pages_pruned),
        thousands(s.pages_total),
        thousands(s.pages_unselected),
        thousands(s.records_read),
        bytes(s.bytes_read),
        thousands(s.rows_scanned),
        thousands(s.rows_out)
    )
}

/// The most bytes a statement may have, from an argument, a file or standard input.
const STATEMENT_LIMIT: u64 = 16 << 20;

/// A statement given as `text` (`-`: standard input) or in `file` (`-`: standard input),
/// at most [`STATEMENT_LIMIT`] bytes and not blank.
fn statement(text: Option<&str>, file: Option<&Path>) -> anyhow::Result<String> {
    use std::io::Read;
    let from_stdin = text == Some("-") || file == Some(Path::new("-"));
    let (what, text) = match (text, file) {
        (Some(_), Some(_)) | (None, None) => {
            bail!("give the statement as an argument, or with -f FILE, not both")
        }
        (Some(t), None) if !from_stdin => ("the command line".to_string(), t.to_string()),
        (_, f) => {
            let (what, input): (String, Box<dyn Read>) = match f {
                Some(f) if !from_stdin => (
                    f.display().to_string(),
                    Box::new(std::fs::File::open(f).with_context(|| {
                        format!("cannot open the statement file {}", f.display())
                    })?),
                ),
                _ => (
                    "standard input".to_string(),
                    Box::new(std::io::stdin().lock()),
                ),
            };
            let mut bytes = Vec::new();
            input
                .take(STATEMENT_LIMIT + 1)
                .read_to_end(&mut bytes)
                .with_context(|| format!("cannot read the statement from {what}"))?;
            let text = String::from_utf8(bytes)
                .with_context(|| format!("the statement from {what} is not UTF-8"))?;
            (what, text)
        }
    };
    if text.len() as u64 > STATEMENT_LIMIT {
        bail!(
            "the statement from {what} is over {} MiB",
            STATEMENT_LIMIT >> 20
        );
    }
    // Blank, or only comments: nothing to run.
    let meaningful = text.lines().any(|l| {
        let l = l.trim();
        !l.is_empty() && !l.starts_with("--")
    });
    if !meaningful {
        bail!("the statement from {what} is empty (only blanks or comments)");
    }
    Ok(text)
}

fn sql(args: SqlArgs) -> anyhow::Result<()> {
    use inpath_query::ResultFormat;
    let text = statement(args.statement.as_deref(), args.file.as_deref())?;
    let session = open_session(
        &args.dir,
        &args.keys,
        args.threads.or(default_threads()),
        &args.offload,
    )?;
    if args.explain {
        return print_out(&format!("{}\n", session.explain(&text)?.trim_end()));
    }
    // Refuse an output that is one of the tables' files before any work.
    let mut inputs = Vec::new();
    if let Some(out) = &args.output {
        if out.is_dir() {
            bail!("-o {}: is a directory; name a .parquet file", out.display());
        }
        for table in inpath_table::table_dirs(&args.dir)? {
            for entry in std::fs::read_dir(&table)?.flatten() {
                inputs.push(inpath_core::Input::File(entry.path()));
            }
        }
        inpath_core::output::check_distinct(out, &inputs)?;
    }
    let result = session.sql(&text)?;
    if args.stats {
        eprintln!("{}", stats_line(&session.stats()));
        if let Some(d) = session.device_stats() {
            eprintln!("{}", device_line(&d));
        }
    }
    if let Some(out) = &args.output {
        let bytes = result.encode(ResultFormat::Parquet)?;
        inpath_core::output::write_file(out, &bytes, &inputs)?;
        eprintln!(
            "wrote {} rows to {}",
            thousands(result.row_count() as u64),
            out.display()
        );
        return Ok(());
    }
    let format = if args.json.on {
        ResultFormat::Json
    } else if args.csv {
        ResultFormat::Csv
    } else {
        ResultFormat::Table
    };
    let bytes = result.encode(format)?;
    print_out(&String::from_utf8_lossy(&bytes))
}

/// Parses `1,6,14` or `1-5,9` into query numbers 1 to 22.
fn parse_queries(text: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    let bad = |part: &str| {
        anyhow::anyhow!("--queries {text}: {part:?} is not valid: numbers 1 to 22 or ranges such as 1-5, separated by commas")
    };
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let (a, b): (usize, usize) = (
            a.parse().map_err(|_| bad(part))?,
            b.parse().map_err(|_| bad(part))?,
        );
        if !(1..=22).contains(&a) || !(1..=22).contains(&b) || a > b {
            return Err(bad(part));
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(bad(text));
    }
    Ok(out)
}

/// The scale factor whose pinned answers fit the tables in the session (by row counts).
fn pinned_scale(session: &inpath_query::SqlSession) -> anyhow::Result<f64> {
    let mut found = Vec::new();
    for (table, _) in inpath_query::tpch_queries::PINNED[0].rows {
        let r = session
            .sql(&format!("SELECT count(*) AS n FROM {table}"))
            .with_context(|| format!("--check needs the TPC-H table {table}"))?;
        let n = r
            .batches
            .first()
            .and_then(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<arrow_array::Int64Array>()
            })
            .map_or(0, |a| a.value(0) as u64);
        found.push((table, n));
    }
    for pinned in &inpath_query::tpch_queries::PINNED {
        if pinned
            .rows
            .iter()
            .zip(&found)
            .all(|((_, a), (_, b))| a == b)
        {
            return Ok(pinned.sf);
        }
    }
    let found: Vec<String> = found.iter().map(|(t, n)| format!("{t} {n}")).collect();
    bail!(
        "--check: answers ship for SF 0.01 and 0.1, and these tables are another scale ({}); \
         pin answers for it with crates/inpath-query/tpch/pin_answers.py --sf N --out DIR and \
         pass --answers DIR",
        found.join(", ")
    )
}

fn tpch(args: TpchArgs) -> anyhow::Result<()> {
    let queries = match &args.queries {
        Some(q) => parse_queries(q)?,
        None => (1..=22).collect(),
    };
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let session = if args.parquet {
        inpath_query::SqlSession::open_parquet(&args.dir, args.threads.or(default_threads()))?
    } else {
        open_session(
            &args.dir,
            &args.keys,
            args.threads.or(default_threads()),
            &args.offload,
        )?
    };
    let check = args.check || args.answers.is_some();
    let answers: Vec<Option<String>> = if !check {
        vec![None; 23]
    } else if let Some(dir) = &args.answers {
        (0..=22)
            .map(|n| {
                if n == 0 {
                    return Ok(None);
                }
                let path = dir.join(format!("q{n:02}.csv"));
                if queries.contains(&n) {
                    std::fs::read_to_string(&path)
                        .map(Some)
                        .with_context(|| format!("--answers: cannot read {}", path.display()))
                } else {
                    Ok(None)
                }
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        let sf = pinned_scale(&session)?;
        (0..=22)
            .map(|n| inpath_query::tpch_queries::pinned_answer(sf, n).map(str::to_string))
            .collect()
    };
    let talk = !args.json.on && std::io::stderr().is_terminal();
    let mut rows_json = Vec::new();
    let mut text =
        String::from("query   rows   seconds  pages read/pruned/total       bytes read  check\n");
    let mut failures = Vec::new();
    let mut total = 0.0;
    for &n in &queries {
        let query = inpath_query::tpch_queries::query(n).expect("1..=22");
        if talk {
            eprint!("\rQ{n:02}...");
        }
        let mut times = Vec::with_capacity(args.runs);
        let mut result = None;
        let mut stats = inpath_query::ScanStats::default();
        let mut device = None;
        let mut cpus = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            session.reset_stats();
            let (u0, s0) = inpath_core::cpu_times();
            let start = Instant::now();
            let r = session.sql(query).with_context(|| format!("Q{n}"))?;
            times.push(start.elapsed().as_secs_f64());
            let (u1, s1) = inpath_core::cpu_times();
            stats = session.stats();
            device = session.device_stats();
            // The process's CPU less the device lanes' (when they run in it): the host's share.
            let device_cpu = match session.device_in_host_process() {
                Some(true) => device.map_or(0.0, |d| d.cpu_seconds),
                _ => 0.0,
            };
            cpus.push(((u1 - u0) + (s1 - s0) - device_cpu).max(0.0));
            result = Some(r);
        }
        cpus.sort_by(f64::total_cmp);
        let host_cpu = cpus[cpus.len() / 2];
        times.sort_by(f64::total_cmp);
        let secs = times[times.len() / 2];
        total += secs;
        let result = result.expect("at least one run");
        let verdict = answers[n]
            .as_ref()
            .map(|expected| inpath_query::tpch_queries::check_answer(&result, expected));
        if let Some(Err(e)) = &verdict {
            failures.push(format!("Q{n}: {e}"));
        }
        text.push_str(&format!(
            "Q{n:<3} {:>7} {:>9.3}  {:>8}/{}/{:<8} {:>14}  {}\n",
            result.row_count(),
            secs,
            stats.pages_total - stats.pages_pruned - stats.pages_unselected,
            stats.pages_pruned,
            stats.pages_total,
            bytes(stats.bytes_read),
            match &verdict {
                None => "-",
                Some(Ok(())) => "equal",
                Some(Err(_)) => "DIFFERENT",
            }
        ));
        rows_json.push(serde_json::json!({
            "query": n,
            "rows": result.row_count(),
            "seconds": secs,
            "times": times,
            "pages_total": stats.pages_total,
            "pages_pruned": stats.pages_pruned,
            "pages_unselected": stats.pages_unselected,
            "records_read": stats.records_read,
            "bytes_read": stats.bytes_read,
            "rows_scanned": stats.rows_scanned,
            "rows_out": stats.rows_out,
            "bytes_out": stats.bytes_out,
            "host_cpu_seconds": host_cpu,
            "device": device,
            "check": verdict.as_ref().map(|v| match v { Ok(()) => "equal".to_string(), Err(e) => e.to_string() }),
        }));
    }
    if talk {
        eprint!("\r");
    }
    text.push_str(&format!(
        "total {:>19.3} s, {} threads\n",
        total,
        args.threads.or(default_threads())
    ));
    if args.json.on {
        let value = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "threads": args.threads.or(default_threads()),
            "runs": args.runs,
            "total_seconds": total,
            "queries": rows_json,
        });
        print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
    } else {
        print_out(&text)?;
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} queries differ from the answers:\n  {}",
            failures.len(),
            queries.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// Parses a tier: `plain`, CODEC, CIPHER or CODEC+CIPHER. Returns the config and the key bits
/// the cipher needs (0 without one).
fn parse_tier(text: &str) -> anyhow::Result<(SealConfig, u32)> {
    let mut config = SealConfig {
        compression: Compression::None,
        cipher: Cipher::None,
    };
    let mut bits = 0;
    if text.eq_ignore_ascii_case("plain") {
        return Ok((config, 0));
    }
    let (mut codec_set, mut cipher_set) = (false, false);
    for part in text.split('+') {
        if !codec_set && !cipher_set {
            if let Ok(c) = Compression::parse(part) {
                config.compression = c;
                codec_set = true;
                continue;
            }
        }
        match Cipher::parse(part) {
            Ok((c, b)) if !cipher_set => {
                config.cipher = c;
                bits = b;
                cipher_set = true;
            }
            _ => bail!(
                "--tier {text} is not valid: use plain, a codec (none, lz4, zstd[-N], \
                 deflate[-N], snappy), a cipher (aes256-gcm, aes{{128,192,256}}-{{ctr,cbc,ecb}}) \
                 or CODEC+CIPHER such as lz4+aes256-gcm"
            ),
        }
    }
    Ok((config, bits))
}

fn gen(args: GenArgs) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    if !(args.sf.is_finite() && args.sf > 0.0) {
        bail!("--sf {} is out of range: a scale factor above 0", args.sf);
    }
    // The size first: a scale factor the disk (or the generator) cannot hold is refused before
    // anything is written, naming what it would take.
    let need = inpath_table::tpch::estimated_bytes(args.sf);
    let need_text = bytes(need.min(u64::MAX as f64) as u64);
    if args.sf > 100_000.0 {
        bail!(
            "--sf {} would write about {need_text} of tables; the generator takes scale factors \
             above 0 up to 100000 (about {})",
            args.sf,
            bytes(inpath_table::tpch::estimated_bytes(100_000.0) as u64)
        );
    }
    if let Some((fs, free)) = free_space(&args.dir) {
        if need > free as f64 {
            bail!(
                "TPC-H SF {} needs about {need_text} in {} (475 MiB of plain pages per SF; a \
                 codec writes less), and {} has {} free",
                args.sf,
                args.dir.display(),
                fs.display(),
                bytes(free)
            );
        }
    }
    let rows_written = Arc::new(AtomicU64::new(0));
    let cancel = Arc::new(AtomicBool::new(false));
    watch_interrupts(cancel.clone());
    let (write, seal) = args.write.options(args.force, args.threads.or(1))?;
    let options = GenOptions {
        write,
        threads: args.threads.or(1),
        rows_written: Some(rows_written.clone()),
        cancel: Some(cancel.clone()),
        ..GenOptions::default()
    };
    let talk = !args.quiet && !args.json.on && std::io::stderr().is_terminal();
    if talk {
        eprintln!(
            "generating TPC-H SF {} into {} ({} pages, about {need_text})...",
            args.sf,
            args.dir.display(),
            seal_name(seal)
        );
    }
    // Rows written against the rows expected, with the time left, on a terminal.
    let bar = talk.then(|| {
        let bar = indicatif::ProgressBar::new(inpath_table::tpch::estimated_rows(args.sf));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg:9} [{bar:30}] {human_pos}/{human_len} rows {per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
        bar
    });
    let start = Instant::now();
    let mut summaries = Vec::new();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    for table in inpath_table::TPCH_TABLES {
        let t = Instant::now();
        if let Some(bar) = &bar {
            bar.set_message(table);
        }
        let done = AtomicBool::new(false);
        let result = std::thread::scope(|scope| {
            if let Some(bar) = &bar {
                scope.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        bar.set_position(rows_written.load(Ordering::Relaxed));
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    }
                });
            }
            let r = inpath_table::tpch::generate_table(table, args.sf, &args.dir, &options);
            done.store(true, Ordering::Relaxed);
            r
        });
        let s = match result {
            Ok(s) => s,
            Err(e @ inpath_table::Error::Interrupted { .. }) => {
                if let Some(bar) = &bar {
                    bar.finish_and_clear();
                }
                let kept: Vec<&str> = summaries
                    .iter()
                    .map(|(s, _): &(inpath_table::TableSummary, f64)| s.table.as_str())
                    .collect();
                eprintln!(
                    "error: {e}{}",
                    match kept.is_empty() {
                        true => String::new(),
                        false => format!(" ({})", kept.join(", ")),
                    }
                );
                std::process::exit(130);
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(bar) = &bar {
            bar.println(format!(
                "  {table:<9} {:>12} rows {:>10}  {:.2} s",
                thousands(s.rows),
                bytes(s.bytes),
                t.elapsed().as_secs_f64()
            ));
        }
        summaries.push((s, t.elapsed().as_secs_f64()));
    }
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let secs = start.elapsed().as_secs_f64();
    if args.quiet {
        return Ok(());
    }
    let total_rows: u64 = summaries.iter().map(|(s, _)| s.rows).sum();
    let total_bytes: u64 = summaries.iter().map(|(s, _)| s.bytes).sum();
    if args.json.on {
        let value = serde_json::json!({
            "dir": args.dir.display().to_string(),
            "scale_factor": args.sf,
            "tier": seal_name(seal),
            "compression": seal.compression.describe(),
            "cipher": seal.cipher.name(),
            "rows_per_page": args.write.rows_per_page,
            "threads": args.threads.or(1),
            "tables": summaries.iter().map(|(s, t)| serde_json::json!({
                "table": s.table, "rows": s.rows, "pages": s.pages, "bytes": s.bytes, "seconds": t,
            })).collect::<Vec<_>>(),
            "rows": total_rows,
            "bytes": total_bytes,
            "seconds": secs,
        });
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    let mut text = format!(
        "TPC-H SF {} in {} ({} pages, {} rows per page)\n",
        args.sf,
        args.dir.display(),
        seal_name(seal),
        thousands(args.write.rows_per_page as u64)
    );
    text.push_str("table          rows      pages        bytes   seconds\n");
    for (s, t) in &summaries {
        text.push_str(&format!(
            "{:<9} {:>12} {:>8} {:>12} {:>9.2}\n",
            s.table,
            thousands(s.rows),
            s.pages,
            bytes(s.bytes),
            t
        ));
    }
    text.push_str(&format!(
        "total     {:>12} {:>8} {:>12} {:>9.2}\n",
        thousands(total_rows),
        "",
        bytes(total_bytes),
        secs
    ));
    print_out(&text)
}

/// The filesystem holding `path` (its nearest existing ancestor) and its bytes free for an
/// unprivileged writer; none where it cannot be read.
fn free_space(path: &Path) -> Option<(PathBuf, u64)> {
    let mut at = if path.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        path.to_path_buf()
    };
    while !at.exists() {
        at = match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
    }
    let s = nix::sys::statvfs::statvfs(&at).ok()?;
    Some((at, s.blocks_available() as u64 * s.fragment_size() as u64))
}

/// Sets `cancel` on SIGINT or SIGTERM (a thread of its own waits for them).
fn watch_interrupts(cancel: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("inpath-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut int), Ok(mut term)) = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        });
}

fn seal_name(seal: SealConfig) -> String {
    match (seal.compression, seal.cipher) {
        (Compression::None, Cipher::None) => "plain".into(),
        (c, Cipher::None) => c.describe(),
        (Compression::None, c) => c.name().into(),
        (c, k) => format!("{}+{}", c.describe(), k.name()),
    }
}

fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let keys = args.keys.ring()?;
    let mut text = String::new();
    let mut json_tables = Vec::new();
    for dir in inpath_table::table_dirs(&args.dir)? {
        let reader = TableReader::open(&dir, &keys).map_err(|e| key_hint(&args.keys, e))?;
        let m = reader.manifest();
        let manifest_bytes = std::fs::metadata(dir.join(inpath_table::format::MANIFEST_FILE))
            .map(|m| m.len())
            .unwrap_or(0);
        let mut columns = Vec::new();
        let mut total = manifest_bytes;
        text.push_str(&format!(
            "table {} ({}): {} rows, {} pages of {} rows, tier {}{}, manifest {}\n",
            m.table,
            dir.display(),
            thousands(m.row_count),
            reader.page_count(),
            thousands(m.rows_per_page),
            m.tier.compression,
            if m.tier.cipher == "none" {
                String::new()
            } else {
                format!("+{} (key {})", m.tier.cipher, m.tier.key_id)
            },
            bytes(manifest_bytes),
        ));
        text.push_str(
            "  #  column            type               null  encoding             width        bytes\n",
        );
        for (i, c) in m.columns.iter().enumerate() {
            let stats = reader.column_stats(i)?;
            total += stats.bytes;
            let encodings: Vec<String> = stats
                .encodings
                .iter()
                .map(|(e, n)| format!("{}:{n}", e.name()))
                .collect();
            let ty = format!("{:?}", c.logical.arrow_type());
            text.push_str(&format!(
                "  {i:<2} {:<17} {:<18} {:<5} {:<20} {:>5} {:>12}\n",
                c.name,
                ty,
                if c.nullable { "yes" } else { "no" },
                encodings.join(","),
                stats.max_width,
                bytes(stats.bytes),
            ));
            columns.push(serde_json::json!({
                "index": i,
                "name": c.name,
                "type": ty,
                "nullable": c.nullable,
                "null_count": stats.null_count,
                "encodings": stats.encodings.iter().map(|(e, n)| (e.name().to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
                "max_width": stats.max_width,
                "dictionary": c.dictionary.as_ref().map(|d| d.len()),
                "bytes": stats.bytes,
            }));
        }
        text.push_str(&format!("  total {}\n", bytes(total)));
        json_tables.push(serde_json::json!({
            "table": m.table,
            "dir": dir.display().to_string(),
            "rows": m.row_count,
            "pages": reader.page_count(),
            "rows_per_page": m.rows_per_page,
            "compression": m.tier.compression,
            "cipher": m.tier.cipher,
            "key_id": m.tier.key_id,
            "manifest_bytes": manifest_bytes,
            "bytes": total,
            "columns": columns,
        }));
    }
    if args.json.on {
        let value = serde_json::json!({ "tables": json_tables });
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    }
    print_out(&text)
}

/// What the demo measured.
struct DemoQuery {
    rows: u64,
    plain: (u64, f64),
    sealed: (u64, f64),
    /// Per query: number, seconds, Q6's revenue or the row count, whether it equals DuckDB's.
    queries: Vec<(usize, f64, String, bool)>,
    stats: inpath_query::ScanStats,
    all_22: (usize, f64),
    /// Q1 with offload: whether it equals DuckDB's answer, the Arrow bytes the host's scans
    /// received without offload and the bytes the device sent with it, the classes' counts.
    offload: (bool, u64, u64, [usize; 3], usize),
    /// Q10 with offload: groups TOPK left on the device, bytes it sent.
    topk: (u64, u64),
}

/// The `inpath demo` section: TPC-H SF 0.01 written as plain and as sealed (LZ4 + AES-256-GCM)
/// column tables, then SQL over the sealed pages (DataFusion with our scan), each answer
/// checked against DuckDB's pinned one.
pub fn demo_section() -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let dir = std::env::temp_dir().join(format!("inpath-demo-query-{}", std::process::id()));
    let result = demo_run(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let d = result?;
    let mut out = String::new();
    writeln!(
        out,
        "== query (AQUOMAN, part 1): SQL (DataFusion) over column tables whose every page is a sealed record"
    )?;
    writeln!(
        out,
        "  TPC-H SF 0.01 (8 tables, {} rows) generated twice in {:.2} s: plain {}, LZ4 + AES-256-GCM {}",
        thousands(d.rows),
        d.plain.1 + d.sealed.1,
        bytes(d.plain.0),
        bytes(d.sealed.0)
    )?;
    for (n, secs, answer, equal) in &d.queries {
        writeln!(
            out,
            "  Q{n} from the sealed pages in {:.1} ms: {answer}; against DuckDB's pinned answer: {}",
            secs * 1e3,
            if *equal { "equal" } else { "DIFFERENT" }
        )?;
    }
    writeln!(
        out,
        "  Q6's scan: {} page records unsealed ({}), the other columns never touched",
        d.stats.records_read,
        bytes(d.stats.bytes_read)
    )?;
    writeln!(
        out,
        "  all 22 TPC-H queries on the sealed pages: {} of 22 equal DuckDB's answers, {:.2} s in all",
        d.all_22.0, d.all_22.1
    )?;
    let (q1_equal, host_bytes, sent, classes, offload_equal) = d.offload;
    writeln!(
        out,
        "  offload (AQUOMAN Table Tasks beside the pages): Q1 sends the host {} instead of {} of rows; \
         against DuckDB's answer: {}; all 22 with offload: {} of 22 equal, {} queries fully \
         offloaded (joins included), {} partly, {} on the host",
        bytes(sent),
        bytes(host_bytes),
        if q1_equal { "equal" } else { "DIFFERENT" },
        offload_equal,
        classes[0],
        classes[1],
        classes[2]
    )?;
    writeln!(
        out,
        "  TOPK on the device: Q10's top 20 customers; {} other groups stayed on the device, {} sent",
        thousands(d.topk.0),
        bytes(d.topk.1)
    )?;
    writeln!(
        out,
        "  next: inpath query gen --sf 1 tpch; inpath query tpch tpch; inpath query explain --offload tpch\n"
    )?;
    Ok(out)
}

fn demo_run(dir: &Path) -> anyhow::Result<DemoQuery> {
    use inpath_query::tpch_queries::{check_answer, pinned_answer, query};
    use inpath_query::SqlSession;
    use inpath_table::generate_tpch;
    let key = inpath_seal::Key::new(&inpath_seal::gen::random_bytes(32, 2026))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let generate = |sub: &str, seal: SealConfig, key: Option<(u32, inpath_seal::Key)>| {
        let start = Instant::now();
        let options = GenOptions {
            write: WriteOptions {
                rows_per_page: 8192,
                seal,
                key,
                ..WriteOptions::default()
            },
            threads,
            ..GenOptions::default()
        };
        let tables = generate_tpch(0.01, &dir.join(sub), &options)?;
        let rows = tables.iter().map(|t| t.rows).sum::<u64>();
        let size = tables.iter().map(|t| t.bytes).sum::<u64>();
        anyhow::Ok((rows, size, start.elapsed().as_secs_f64()))
    };
    let plain_tier = SealConfig {
        compression: Compression::None,
        cipher: Cipher::None,
    };
    let sealed_tier = SealConfig {
        compression: Compression::Lz4,
        cipher: Cipher::Gcm,
    };
    let (rows, plain_bytes, plain_secs) = generate("plain", plain_tier, None)?;
    let (_, sealed_bytes, sealed_secs) = generate("sealed", sealed_tier, Some((1, key.clone())))?;

    let mut ring = KeyRing::new();
    ring.insert(1, key);
    let session = SqlSession::open(&dir.join("sealed"), &ring, threads)?;
    let mut queries = Vec::new();
    let mut stats = inpath_query::ScanStats::default();
    for n in [1, 6, 14] {
        session.reset_stats();
        let start = Instant::now();
        let result = session.sql(query(n).expect("1..=22"))?;
        let secs = start.elapsed().as_secs_f64();
        let equal = check_answer(&result, pinned_answer(0.01, n).expect("pinned")).is_ok();
        let answer = match n {
            6 | 14 => {
                let csv = result.encode(inpath_query::ResultFormat::Csv)?;
                let text = String::from_utf8_lossy(&csv);
                let value = text.lines().nth(1).unwrap_or("(no row)");
                format!(
                    "{} {value}",
                    if n == 6 { "revenue" } else { "promo_revenue" }
                )
            }
            _ => format!("{} groups", result.row_count()),
        };
        if n == 6 {
            stats = session.stats();
        }
        queries.push((n, secs, answer, equal));
    }
    let start = Instant::now();
    let mut equal = 0;
    for n in 1..=22 {
        let result = session.sql(query(n).expect("1..=22"))?;
        equal +=
            usize::from(check_answer(&result, pinned_answer(0.01, n).expect("pinned")).is_ok());
    }
    let all_22 = (equal, start.elapsed().as_secs_f64());

    // Offload: Q1 with the aggregate beside the pages, only its groups cross to the host.
    session.reset_stats();
    session.sql(query(1).expect("1..=22"))?;
    let host_bytes = session.stats().bytes_out;
    let device = SqlSession::open_with(
        &dir.join("sealed"),
        &ring,
        threads,
        Some(inpath_query::sql::OffloadOptions::default()),
    )?;
    let result = device.sql(query(1).expect("1..=22"))?;
    let q1_equal = check_answer(&result, pinned_answer(0.01, 1).expect("pinned")).is_ok();
    let sent = device.device_stats().map_or(0, |d| d.bytes_sent);
    let mut classes = [0usize; 3];
    let mut offload_equal = 0;
    let mut topk = (0, 0);
    for n in 1..=22 {
        let text = query(n).expect("1..=22");
        device.reset_stats();
        let result = device.sql(text)?;
        if n == 10 {
            topk = device
                .device_stats()
                .map_or((0, 0), |d| (d.groups_cut, d.bytes_sent));
        }
        offload_equal +=
            usize::from(check_answer(&result, pinned_answer(0.01, n).expect("pinned")).is_ok());
        let class = device.explain_offload(text)?.class;
        classes[match class {
            "full" => 0,
            "partial" => 1,
            _ => 2,
        }] += 1;
    }
    Ok(DemoQuery {
        rows,
        plain: (plain_bytes, plain_secs),
        sealed: (sealed_bytes, sealed_secs),
        queries,
        stats,
        all_22,
        offload: (q1_equal, host_bytes, sent, classes, offload_equal),
        topk,
    })
}
