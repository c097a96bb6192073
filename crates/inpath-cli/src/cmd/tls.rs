//! `inpath tls`: certificates and tokens for the servers' TLS and authentication
//! (docs/SECURITY.md). `init` writes a small CA with a server and a client certificate;
//! `token` adds a token with a role to a server's token file and prints it once.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use inpath_net::certs::{self, InitOptions, Validity};
use inpath_net::tokens::{self, Role};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `inpath tls`.
#[derive(Args)]
pub struct TlsArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Write a new CA, a server certificate for the given hosts and a client certificate,
    /// each with its key, into DIR (PEM files, mode 0600).
    #[command(after_help = "Examples:
  inpath tls init /etc/inpath/tls --host store1.example.com --host 10.0.0.5
  inpath tls init ./tls --days 30 --json

Files: ca.pem (what clients trust: --tls-ca; what servers check client certificates against:
--tls-client-ca), ca.key (signs certificates: keep it off the servers), server.pem and
server.key (--tls-cert, --tls-key; memcached's ssl_chain_cert, ssl_key), client.pem and
client.key (a client's --tls-cert, --tls-key). The host names and addresses are the names
clients connect to; localhost, 127.0.0.1 and ::1 when none is given. For production, a CA
your organisation runs is better; this one is for quickstarts and tests. See docs/SECURITY.md.")]
    Init(InitArgs),
    /// Add a token with a role to a server's token file (created, mode 0600) and print the
    /// token once: the file keeps only its SHA-256.
    #[command(after_help = "Examples:
  inpath tls token --tokens /etc/inpath/tokens --name ci --role read
  inpath tls token --tokens /etc/inpath/tokens --name loader --role write -o loader.token

Roles: read (kernels, read, ls, stats), write (also put, rm, index). A name already in the
file gets a new token (the old one stops working when the server restarts). Clients send the
token with --token-file FILE (or INPATH_TOKEN), over TLS. See docs/SECURITY.md.")]
    Token(TokenArgs),
}

#[derive(Args)]
struct InitArgs {
    /// Directory to write the files into (created, mode 0700, when missing).
    dir: PathBuf,
    /// A host name or IP address the server certificate is for (repeatable).
    #[arg(long = "host", value_name = "NAME")]
    hosts: Vec<String>,
    /// The client certificate's name.
    #[arg(long, default_value = "inpath client")]
    client_name: String,
    /// Days the certificates are valid, from now (1 to 36500).
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=36500))]
    days: u32,
    /// First day the certificates are valid (YYYY-MM-DD, UTC), with --not-after instead of
    /// --days (an expired set for tests: both in the past).
    #[arg(long, value_name = "DATE", requires = "not_after")]
    not_before: Option<String>,
    /// Last day the certificates are valid (YYYY-MM-DD, UTC).
    #[arg(long, value_name = "DATE", requires = "not_before")]
    not_after: Option<String>,
    /// Replace the files if DIR already has them.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    json: crate::common::Json,
}

#[derive(Args)]
struct TokenArgs {
    /// The server's token file (created when missing).
    #[arg(long, value_name = "FILE")]
    tokens: PathBuf,
    /// The token's name (1 to 64 of A-Z a-z 0-9 . _ @ -).
    #[arg(long)]
    name: String,
    /// What it may do: read or write.
    #[arg(long)]
    role: String,
    /// Write the token into this file (mode 0600) instead of printing it.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    json: crate::common::Json,
}

/// Runs `inpath tls`.
pub fn run(args: TlsArgs) -> Result<()> {
    match args.action {
        Action::Init(a) => init(a),
        Action::Token(a) => token(a),
    }
}

fn init(a: InitArgs) -> Result<()> {
    let validity = match (&a.not_before, &a.not_after) {
        (Some(b), Some(e)) => Validity {
            not_before: certs::parse_date(b).context("--not-before")?,
            not_after: certs::parse_date(e).context("--not-after")?
                + std::time::Duration::from_secs(86_399),
        },
        _ => Validity::days(a.days),
    };
    let mut options = InitOptions {
        client_name: a.client_name.clone(),
        validity,
        replace: a.force,
        ..InitOptions::default()
    };
    if !a.hosts.is_empty() {
        options.hosts = a.hosts.clone();
    }
    let f = certs::init(&a.dir, &options)
        .with_context(|| format!("inpath tls init {}", a.dir.display()))?;
    if a.json.on {
        let path = |p: &Path| p.display().to_string();
        let v = json!({
            "dir": path(&a.dir),
            "hosts": options.hosts,
            "client_name": options.client_name,
            "ca": path(&f.ca), "ca_key": path(&f.ca_key),
            "server_cert": path(&f.server_cert), "server_key": path(&f.server_key),
            "client_cert": path(&f.client_cert), "client_key": path(&f.client_key),
        });
        return crate::common::print_out(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let d = |p: &Path| p.display().to_string();
    let text = format!(
        "wrote, mode 0600:
  {ca}  the CA certificate: clients trust it (--tls-ca), servers check client certificates against it (--tls-client-ca)
  {cak}  the CA's key: signs certificates; keep it off the servers
  {sc}, {sk}  the server's certificate and key for {hosts}
  {cc}, {ck}  a client certificate and key ({client})
next:
  inpath store serve STORE --listen 0.0.0.0:7420 --tls-cert {sc} --tls-key {sk} --tls-client-ca {ca}
  inpath store ls --remote HOST:7420 --tls-ca {ca} --tls-cert {cc} --tls-key {ck}
  inpath cache serve -l 0.0.0.0 -Z -o ssl_chain_cert={sc},ssl_key={sk},ssl_ca_cert={ca},ssl_verify_mode=2
",
        ca = d(&f.ca),
        cak = d(&f.ca_key),
        sc = d(&f.server_cert),
        sk = d(&f.server_key),
        cc = d(&f.client_cert),
        ck = d(&f.client_key),
        hosts = options.hosts.join(", "),
        client = options.client_name,
    );
    crate::common::print_out(&text)
}

fn token(a: TokenArgs) -> Result<()> {
    let role = Role::parse(&a.role).context("--role")?;
    if !tokens::valid_name(&a.name) {
        bail!(
            "--name {:?}: a token name is 1 to 64 of A-Z a-z 0-9 . _ @ -",
            a.name
        );
    }
    let old = if a.tokens.exists() {
        let text = std::fs::read_to_string(&a.tokens)
            .with_context(|| format!("cannot read token file {}", a.tokens.display()))?;
        // Refuse to add to a file the server would refuse to read.
        inpath_net::Tokens::parse(&text, &a.tokens)?;
        text
    } else {
        String::new()
    };
    let token = tokens::generate()?;
    let text = tokens::with_entry(&old, &a.name, role, &token);
    write_private(&a.tokens, text.as_bytes())?;
    let replaced = old
        .lines()
        .any(|l| l.split_whitespace().next() == Some(a.name.as_str()));
    eprintln!(
        "inpath tls token: {} {} with role {} in {} (its SHA-256 only)",
        if replaced { "replaced" } else { "added" },
        a.name,
        role.name(),
        a.tokens.display()
    );
    if let Some(out) = &a.output {
        write_private(out, format!("{token}\n").as_bytes())?;
    }
    let shown = if a.output.is_some() {
        None
    } else {
        Some(token.as_str())
    };
    if a.json.on {
        let v = json!({
            "tokens": a.tokens.display().to_string(),
            "name": a.name,
            "role": role.name(),
            "replaced": replaced,
            "token": shown,
            "token_file": a.output.as_ref().map(|p| p.display().to_string()),
        });
        return crate::common::print_out(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    match shown {
        Some(t) => crate::common::print_out(&format!("{t}\n")),
        None => Ok(()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = inpath_core::output::OutputFile::create_with_mode(path, &[], 0o600)
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.commit()
        .with_context(|| format!("cannot write {}", path.display()))
}
