//! `inpath query serve` (the Arrow Flight SQL server, `inpath-flight`) and `inpath query
//! split` (a directory of tables divided by page ranges into one directory per node).

use super::query_session::{default_threads, open_session, OffloadArgs};
use crate::cmd::seal::sealing_key;
use crate::common::{thousands, KeyFile};
use anyhow::{bail, Context};
use clap::Args;
use inpath_seal::{Cipher, Compression, SealConfig};
use inpath_table::{TableReader, WriteOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `inpath query serve`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query serve tpch --listen 127.0.0.1:7430 --offload\n  \
    inpath tls init tls && inpath tls token --tokens tokens.txt --name bi --role read -o bi.token\n  \
    inpath query serve tpch --listen 0.0.0.0:7430 --offload --tls-cert tls/server.pem \\\n      \
      --tls-key tls/server.key --tokens tokens.txt\n\n\
Clients: any Arrow Flight SQL client. Python with ADBC:\n  \
    import adbc_driver_flightsql.dbapi as flight_sql\n  \
    conn = flight_sql.connect(\"grpc://127.0.0.1:7430\")\n  \
    conn.cursor().execute(\"SELECT count(*) FROM lineitem\")\n\n\
It prints `listening on grpc://ADDR` (grpc+tls:// with TLS) on standard output once it listens,\n\
and stops on SIGINT or SIGTERM after the statements in flight end. Statements only read:\n\
DDL, COPY, INSERT and SET are refused. See docs/query.md, \"Serving tables\".")]
pub struct ServeArgs {
    /// A table directory, or a directory of table directories (tables by directory name).
    dir: PathBuf,
    /// Address to listen on (HOST:PORT; port 0 picks a free one). Beyond loopback it needs
    /// TLS and authentication (--tls-cert with --tls-client-ca or --tokens), or
    /// --insecure-no-auth.
    #[arg(long, default_value = "127.0.0.1:7430")]
    listen: String,
    /// Statements streaming at once (1 to 1024); more wait up to --queue-wait seconds for one
    /// to end, then fail with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_statements: u32,
    /// Seconds a statement beyond --max-statements waits (0 to 3600).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    queue_wait: u64,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    threads: crate::common::Threads,
    #[command(flatten)]
    offload: OffloadArgs,
    #[command(flatten)]
    auth: crate::security::ServerAuth,
    #[command(flatten)]
    insecure: crate::security::Insecure,
}

/// Runs `inpath query serve`.
pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let tls = a.auth.tls()?;
    let tokens = crate::security::tokens(a.auth.tokens.as_ref())?;
    let protection = inpath_net::Protection {
        tls: tls.is_some(),
        auth: tokens.is_some() || tls.as_ref().is_some_and(|t| t.requires_client_cert()),
    };
    crate::security::check_listener("query serve", &a.listen, protection, a.insecure)?;
    let auth = inpath_flight::Auth {
        tokens: tokens.clone(),
        certs: a.auth.tls_client_ca.is_some(),
        cert_role: a.auth.cert_role()?,
        limiter: a.auth.limiter(),
    };
    let session = open_session(&a.dir, &a.keys, a.threads.or(default_threads()), &a.offload)?;
    if session.tables().is_empty() {
        bail!("{}: holds no tables to serve", a.dir.display());
    }
    let listener = std::net::TcpListener::bind(&a.listen)
        .with_context(|| format!("--listen {}: cannot listen", a.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
    {
        // The address first, on standard output (port 0 picks one): scripts read it.
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {scheme}://{addr}")?;
        out.flush()?;
    }
    let who = match (&tokens, auth.certs) {
        (Some(_), true) => "a token or a client certificate",
        (Some(_), false) => "a token",
        (None, true) => "a client certificate",
        (None, false) => "no credential",
    };
    eprintln!(
        "inpath query serve: {} tables of {} over Flight SQL{}; clients need {who}; {} \
         statements at once",
        session.tables().len(),
        a.dir.display(),
        if session.device_memory().is_some() {
            ", with offload"
        } else {
            ""
        },
        a.max_statements
    );
    let options = inpath_flight::ServeOptions {
        max_statements: a.max_statements as usize,
        queue_wait: Duration::from_secs(a.queue_wait),
        tls,
        auth,
    };
    let shutdown = async {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    inpath_flight::serve(Arc::new(session), listener, options, shutdown)?;
    eprintln!("inpath query serve: stopped");
    Ok(())
}

/// Arguments of `inpath query split`.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
    inpath query split tpch --out node1/tpch,node2/tpch\n  \
    inpath query serve node1/tpch --listen 127.0.0.1:7431 & \
    inpath query serve node2/tpch --listen 127.0.0.1:7432 &\n\n\
Each table's pages are divided into as many ranges as there are outputs, in order: part k \
gets pages [ceil(k*P/N), ceil((k+1)*P/N)). A table of fewer pages than parts leaves the later parts an \
empty table of the same schema, so every node holds every table. Sealed tables are written \
with their own tier (the key file must hold their key).")]
pub struct SplitArgs {
    /// A directory of tables (or one table).
    dir: PathBuf,
    /// The output directories, one per part, comma-separated (2 to 1024; each new or empty).
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    out: Vec<PathBuf>,
    #[command(flatten)]
    keys: KeyFile,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Runs `inpath query split`.
pub fn split(a: SplitArgs) -> anyhow::Result<()> {
    let parts = a.out.len();
    if !(2..=1024).contains(&parts) {
        bail!("--out names {parts} directories: 2 to 1024, one per part");
    }
    for (i, o) in a.out.iter().enumerate() {
        if a.out[..i].contains(o) {
            bail!("--out names {} twice", o.display());
        }
        if o.exists() && std::fs::read_dir(o).map_or(true, |mut d| d.next().is_some()) {
            bail!(
                "--out {}: exists and is not an empty directory (split never overwrites)",
                o.display()
            );
        }
        if o.starts_with(&a.dir) || a.dir.starts_with(o) {
            bail!(
                "--out {}: inside the input {} (or holding it)",
                o.display(),
                a.dir.display()
            );
        }
    }
    let ring = a.keys.ring()?;
    let readers = inpath_table::reader::open_table_dirs(&a.dir, &ring)
        .with_context(|| format!("{}: cannot open its tables", a.dir.display()))?;
    if readers.is_empty() {
        bail!("{}: holds no tables", a.dir.display());
    }
    let mut report = Vec::new();
    for (name, reader) in &readers {
        let options = write_options(reader, &a.keys)?;
        let pages = reader.page_count();
        let projection: Vec<usize> = (0..reader.schema().fields().len()).collect();
        let mut rows_out = Vec::with_capacity(parts);
        for (k, out) in a.out.iter().enumerate() {
            std::fs::create_dir_all(out)
                .with_context(|| format!("--out {}: cannot create it", out.display()))?;
            // Rounded up: a table of fewer pages than parts fills the first parts.
            let range: Vec<usize> =
                ((k * pages).div_ceil(parts)..((k + 1) * pages).div_ceil(parts)).collect();
            let mut writer = inpath_table::TableWriter::create(
                &out.join(name),
                reader.schema(),
                options.clone(),
            )
            .with_context(|| format!("{name}: cannot write part {}", k + 1))?;
            let mut rows = 0u64;
            for batch in reader.scan(&projection, &range)? {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                writer.write(&batch)?;
            }
            writer.finish()?;
            rows_out.push(serde_json::json!({"dir": out, "pages": range.len(), "rows": rows}));
        }
        report.push(serde_json::json!({"table": name, "pages": pages, "rows": reader.row_count(), "parts": rows_out}));
    }
    if a.json.on {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for t in &report {
            let parts: Vec<String> = t["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| thousands(p["rows"].as_u64().unwrap_or(0)))
                .collect();
            println!(
                "{}: {} rows in {} pages -> {}",
                t["table"].as_str().unwrap_or(""),
                thousands(t["rows"].as_u64().unwrap_or(0)),
                t["pages"],
                parts.join(" + ")
            );
        }
    }
    Ok(())
}

/// A table's own tier, rows per page and key, for writing its parts.
fn write_options(reader: &TableReader, keys: &KeyFile) -> anyhow::Result<WriteOptions> {
    let tier = &reader.manifest().tier;
    let compression = Compression::parse(&tier.compression)
        .with_context(|| format!("{}: its tier's codec", reader.table()))?;
    let (cipher, bits) = Cipher::parse(&tier.cipher)
        .with_context(|| format!("{}: its tier's cipher", reader.table()))?;
    let key = sealing_key(
        keys.key_file.as_deref(),
        keys.allow_insecure_key_file,
        Some(tier.key_id),
        cipher,
        bits,
        &format!("table {}'s tier", reader.table()),
    )?;
    Ok(WriteOptions {
        rows_per_page: reader.rows_per_page(),
        seal: SealConfig {
            compression,
            cipher,
        },
        key,
        ..WriteOptions::default()
    })
}
