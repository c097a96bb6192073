//! The flags every server and client shares for TLS and authentication (docs/SECURITY.md),
//! defined once and flattened into each command: a client's `--tls-ca`, `--tls-cert`,
//! `--tls-key`, `--token-file`; a server's `--tls-cert`, `--tls-key`, `--tls-client-ca`,
//! `--tokens`; the live pages' `--http` with `--http-tls-cert`, `--http-tls-key` and
//! `--http-tokens`; and `--insecure-no-auth`, the one way to open an unprotected port beyond
//! loopback. What they build comes from `inpath_net`.

use anyhow::{bail, Context, Result};
use clap::Args;
use inpath_net::{
    policy, ClientCerts, CredentialFiles, Credentials, HttpGuard, Limiter, MinVersion, Protection,
    Role, ServerTls, ServerTlsFiles, Slowing, Tokens,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A client's TLS and credential (`--remote` verbs).
#[derive(Args, Clone, Debug, Default)]
pub struct ClientTls {
    /// With --remote: connect over TLS and check the server's certificate against this CA
    /// file (PEM; `inpath tls init` writes ca.pem).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for a server that checks them (--tls-client-ca).
    #[arg(long, value_name = "FILE", requires = "tls_ca")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM; default: in the --tls-cert file).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Send the token in this file (its first line; mode 0600) once per connection; without
    /// it, the INPATH_TOKEN environment variable's. Only over TLS, or to loopback.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// The name the server's certificate must hold (default: the host of the address).
    #[arg(long, value_name = "NAME", requires = "tls_ca")]
    pub tls_server_name: Option<String>,
}

impl ClientTls {
    /// Whether any of the flags was given.
    pub fn given(&self) -> bool {
        self.tls_ca.is_some() || self.token_file.is_some()
    }

    /// The credentials the flags (and `INPATH_TOKEN`) name, files read.
    pub fn credentials(&self) -> Result<Credentials> {
        let files = CredentialFiles {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            token_file: self.token_file.clone(),
            token: std::env::var(inpath_net::client::TOKEN_ENV).ok(),
            server_name: self.tls_server_name.clone(),
        };
        Ok(files.load()?)
    }
}

/// A server's TLS and who may connect (`store serve`).
#[derive(Args, Clone, Debug)]
pub struct ServerAuth {
    /// Serve TLS with this certificate chain (PEM: the server's certificate first).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM; refused if every user can read it).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Check client certificates against this CA file (PEM): a client presenting one it
    /// signed is authenticated with --client-cert-role. Required of every client, unless
    /// --tokens is given too (then a certificate or a token).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// The role of a client authenticated by its certificate: read (kernels, read, ls,
    /// stats) or write (also put, rm, index).
    #[arg(long, value_name = "ROLE", default_value = "read")]
    pub client_cert_role: String,
    /// The lowest TLS version accepted: 1.2 or 1.3.
    #[arg(long, value_name = "VERSION", default_value = "1.2")]
    pub tls_min_version: String,
    /// Token file (`inpath tls token` writes it: names, roles and SHA-256 hashes): every
    /// connection sends a token, once, and gets its role.
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Failed attempts per second from one address before each further attempt from it
    /// waits --auth-delay-ms (1 to 1,000,000).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub auth_failures_per_second: u32,
    /// The wait between attempts of an address over that rate, in milliseconds (0 to
    /// 60,000).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub auth_delay_ms: u64,
}

/// `--insecure-no-auth`.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct Insecure {
    /// Listen beyond loopback without TLS and authentication anyway: anyone who can reach
    /// the port can use it (printed at start). Without it, such a listener is refused.
    #[arg(long)]
    pub insecure_no_auth: bool,
}

/// The live pages' HTTP port (`--http`) and what protects it.
#[derive(Args, Clone, Debug, Default)]
pub struct HttpArgs {
    /// Serve JSON, Prometheus metrics and a live page for a browser here: PORT (on
    /// loopback) or HOST:PORT.
    #[arg(long, value_name = "[HOST:]PORT")]
    pub http: Option<String>,
    /// HTTPS with this certificate chain (PEM). Default: the server's own TLS certificate,
    /// when it has one.
    #[arg(long, value_name = "FILE", requires = "http_tls_key")]
    pub http_tls_cert: Option<PathBuf>,
    /// The key of --http-tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "http_tls_cert")]
    pub http_tls_key: Option<PathBuf>,
    /// Require a token of this file on every path but /health (`Authorization: Bearer`, or
    /// a browser's password prompt). Default: the server's --tokens, when it has them.
    #[arg(long, value_name = "FILE")]
    pub http_tokens: Option<PathBuf>,
}

/// Parses `1.2` or `1.3` (also memcached's `tlsv1.2`, and its numbers 2 and 3).
pub fn min_version(text: &str) -> Result<MinVersion> {
    match text {
        "1.2" | "tlsv1.2" | "2" => Ok(MinVersion::Tls12),
        "1.3" | "tlsv1.3" | "3" => Ok(MinVersion::Tls13),
        other => bail!(
            "TLS version {other:?}: 1.2 or 1.3 (rustls speaks no older version; 1.0 and 1.1 \
             are never offered)"
        ),
    }
}

/// Reads a token file.
pub fn tokens(path: Option<&PathBuf>) -> Result<Option<Arc<Tokens>>> {
    match path {
        None => Ok(None),
        Some(p) => {
            let t = Tokens::load(p)?;
            if t.is_empty() {
                eprintln!(
                    "warning: token file {} holds no token: no token will be taken",
                    p.display()
                );
            }
            Ok(Some(Arc::new(t)))
        }
    }
}

impl ServerAuth {
    /// The server's TLS, if --tls-cert is given.
    pub fn tls(&self) -> Result<Option<Arc<ServerTls>>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let mut files = ServerTlsFiles::new(cert, key);
        files.min_version = min_version(&self.tls_min_version).context("--tls-min-version")?;
        if let Some(ca) = &self.tls_client_ca {
            let mode = if self.tokens.is_some() {
                ClientCerts::Request
            } else {
                ClientCerts::Require
            };
            files = files.with_client_ca(ca, mode);
        }
        Ok(Some(Arc::new(ServerTls::load(files)?)))
    }

    /// The role of certificate clients.
    pub fn cert_role(&self) -> Result<Role> {
        Role::parse(&self.client_cert_role).context("--client-cert-role")
    }

    /// The limiter of failed attempts.
    pub fn limiter(&self) -> Arc<Limiter> {
        Arc::new(Limiter::new(Slowing {
            free_per_second: self.auth_failures_per_second,
            delay: Duration::from_millis(self.auth_delay_ms),
        }))
    }
}

/// Checks `listen` against the listener policy for `service` (`store serve`); prints the
/// warning when --insecure-no-auth lets an unprotected listener through.
pub fn check_listener(
    service: &str,
    listen: &str,
    protection: Protection,
    insecure: Insecure,
) -> Result<()> {
    if let Some(warning) = policy::check(
        service,
        listen,
        protection,
        insecure.insecure_no_auth,
        "--insecure-no-auth",
    )? {
        eprintln!("{warning}");
    }
    Ok(())
}

/// The live pages' port: the address (a port alone is loopback), checked against the policy,
/// with its guard. `tls` and `tokens` are the server's own, used when the HTTP flags name
/// none; `limiter` is shared with the server's port.
pub fn http_plan(
    service: &str,
    args: &HttpArgs,
    tls: Option<Arc<ServerTls>>,
    tokens: Option<Arc<Tokens>>,
    limiter: Arc<Limiter>,
    insecure: Insecure,
) -> Result<Option<(String, HttpGuard)>> {
    let Some(addr) = &args.http else {
        return Ok(None);
    };
    let addr = policy::loopback_unless_told(addr);
    let tls = match (&args.http_tls_cert, &args.http_tls_key) {
        (Some(c), Some(k)) => Some(Arc::new(ServerTls::load(ServerTlsFiles::new(c, k))?)),
        _ => tls
            .map(|t| {
                // The server's certificate, without its client-certificate check: browsers
                // do not carry client certificates.
                let mut files = t.files().clone();
                files.client_ca = None;
                files.client_certs = ClientCerts::Ignore;
                ServerTls::load(files).map(Arc::new)
            })
            .transpose()?,
    };
    let tokens = match &args.http_tokens {
        Some(p) => self::tokens(Some(p))?,
        None => tokens,
    };
    let protection = Protection {
        tls: tls.is_some(),
        auth: tokens.is_some(),
    };
    // The error names the flag: the server's own port may be fine.
    check_listener(&format!("{service} --http"), &addr, protection, insecure)
        .map_err(|e| anyhow::anyhow!("--http: {e}"))?;
    Ok(Some((
        addr,
        HttpGuard {
            tls,
            tokens,
            limiter,
        },
    )))
}

/// [`http_plan`], and the port bound.
pub fn http_port(
    service: &str,
    args: &HttpArgs,
    tls: Option<Arc<ServerTls>>,
    tokens: Option<Arc<Tokens>>,
    limiter: Arc<Limiter>,
    insecure: Insecure,
) -> Result<Option<(std::net::TcpListener, HttpGuard)>> {
    let Some((addr, guard)) = http_plan(service, args, tls, tokens, limiter, insecure)? else {
        return Ok(None);
    };
    let listener = std::net::TcpListener::bind(&addr)
        .with_context(|| format!("--http {addr}: cannot listen"))?;
    Ok(Some((listener, guard)))
}
