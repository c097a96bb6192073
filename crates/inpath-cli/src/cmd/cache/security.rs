//! `cache serve`'s TLS and authentication with memcached 1.6.18's options and meanings
//! (docs/cache.md, "TLS and authentication"): `-Z` with `-o ssl_chain_cert`, `ssl_key`,
//! `ssl_ca_cert`, `ssl_verify_mode`, `ssl_min_version` (and the others memcached lists), the
//! `notls:` prefix of `-l` addresses, `-Y FILE` (ASCII authentication), `-S` (SASL PLAIN in the
//! binary protocol); and the listener policy: an address beyond loopback needs TLS and
//! authentication, or `--insecure-no-auth`.

use anyhow::{bail, Context, Result};
use clap::Args;
use inpath_cache::{Listener, Protocol, Security, Users};
use inpath_net::{ClientCerts, Limiter, MinVersion, Protection, ServerTls, ServerTlsFiles};
use std::path::PathBuf;
use std::sync::Arc;

/// The security options of `cache serve`.
#[derive(Args, Clone, Debug, Default)]
pub struct SecurityArgs {
    /// Enable TLS (memcached -Z) on every listener but those -l marks notls:, with -o
    /// ssl_chain_cert=FILE,ssl_key=FILE (and ssl_ca_cert, ssl_verify_mode 0-3,
    /// ssl_min_version 2|3, as memcached).
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// ASCII authentication (memcached -Y): a file of user:password lines; a connection's
    /// first command is `set` with `user password` as its value. Text protocol only.
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// SASL PLAIN authentication in the binary protocol (memcached -S), users from a
    /// user:password file: --sasl-pwdb, or the MEMCACHED_SASL_PWDB environment variable.
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// The user:password file of -S (default: $MEMCACHED_SASL_PWDB).
    #[arg(long, value_name = "FILE")]
    pub sasl_pwdb: Option<PathBuf>,
    /// Failed authentications per second from one address before each further attempt from
    /// it waits --auth-delay-ms (1 to 1,000,000).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub auth_failures_per_second: u32,
    /// The wait between attempts of an address over that rate, in milliseconds (0 to
    /// 60,000).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub auth_delay_ms: u64,
    #[command(flatten)]
    pub insecure: crate::security::Insecure,
}

/// The `ssl_*` extended options, parsed.
#[derive(Default)]
struct SslOptions {
    chain_cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca_cert: Option<PathBuf>,
    verify_mode: u8,
    min_version: u8,
    keyformat: i64,
    ciphers: Option<String>,
    wbuf_kib: u32,
    session_cache: bool,
    kernel_tls: bool,
}

/// Whether `-o` option `name` is one of memcached's TLS options (taken here).
pub fn is_ssl_option(name: &str) -> bool {
    name.starts_with("ssl_")
}

fn ssl_options(extended: &[String]) -> Result<SslOptions> {
    let mut o = SslOptions {
        min_version: 2,
        keyformat: 1,
        wbuf_kib: 16,
        ..SslOptions::default()
    };
    for option in extended.iter().flat_map(|o| o.split(',')) {
        let option = option.trim();
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (option, None),
        };
        if !is_ssl_option(name) {
            continue;
        }
        let need = || -> Result<&str> {
            value
                .filter(|v| !v.is_empty())
                .with_context(|| format!("Missing {name} argument (-o {name}=VALUE)"))
        };
        let int = |what: &str| -> Result<i64> {
            need()?
                .parse::<i64>()
                .with_context(|| format!("could not parse argument to {name}: {what}"))
        };
        match name {
            "ssl_chain_cert" => o.chain_cert = Some(need()?.into()),
            "ssl_key" => o.key = Some(need()?.into()),
            "ssl_ca_cert" => o.ca_cert = Some(need()?.into()),
            "ssl_verify_mode" => {
                let v = int("0 (none), 1 (request), 2 (require) or 3 (once)")?;
                if !(0..=3).contains(&v) {
                    bail!(
                        "Invalid ssl_verify_mode {v}: 0 (none), 1 (request), 2 (require) or 3 \
                         (once)"
                    );
                }
                o.verify_mode = v as u8;
            }
            "ssl_min_version" => {
                let v = int("0 (tlsv1.0), 1 (tlsv1.1), 2 (tlsv1.2) or 3 (tlsv1.3)")?;
                if !(0..=3).contains(&v) {
                    bail!(
                        "Invalid ssl_min_version {v}: 0 (tlsv1.0), 1 (tlsv1.1), 2 (tlsv1.2) or \
                         3 (tlsv1.3)"
                    );
                }
                o.min_version = v as u8;
            }
            "ssl_keyformat" => o.keyformat = int("1 (PEM)")?,
            "ssl_ciphers" => o.ciphers = Some(need()?.to_string()),
            "ssl_wbuf_size" => {
                o.wbuf_kib = need()?
                    .parse()
                    .context("could not parse argument to ssl_wbuf_size (kilobytes)")?
            }
            "ssl_session_cache" => o.session_cache = true,
            "ssl_kernel_tls" => o.kernel_tls = true,
            other => bail!(
                "-o {other}: not a TLS option memcached 1.6.18 has (ssl_chain_cert, ssl_key, \
                 ssl_keyformat, ssl_verify_mode, ssl_ciphers, ssl_ca_cert, ssl_wbuf_size, \
                 ssl_session_cache, ssl_kernel_tls, ssl_min_version)"
            ),
        }
    }
    Ok(o)
}

/// One `-l` entry: `[notls:]HOST[:PORT]`, `[V6][:PORT]` or `*`.
fn listener(entry: &str, port: u16, ssl: bool) -> Result<Listener> {
    let (tls, rest) = match entry.strip_prefix("notls:") {
        Some(rest) if ssl => (false, rest),
        Some(_) => bail!("-l {entry}: 'notls' option is valid only when SSL is enabled (-Z)"),
        None => (ssl, entry),
    };
    if rest.starts_with("proto[") || rest.starts_with("tag[") {
        bail!("-l {entry}: listener protocol and tag prefixes are not supported (use -B)");
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .with_context(|| format!("-l {entry}: Invalid IPV6 address"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p
                .parse()
                .with_context(|| format!("-l {entry}: Invalid port number: {p:?}"))?,
            None => port,
        };
        (format!("[{h}]"), port)
    } else {
        match rest.rsplit_once(':') {
            // More than one ':' and no brackets: an IPv6 address without a port.
            Some((h, _)) if h.contains(':') => (format!("[{rest}]"), port),
            Some((h, p)) => (
                h.to_string(),
                p.parse()
                    .with_context(|| format!("-l {entry}: Invalid port number: {p:?}"))?,
            ),
            None => (rest.to_string(), port),
        }
    };
    let host = if host == "*" {
        "0.0.0.0".to_string()
    } else {
        host
    };
    Ok(Listener {
        addr: format!("{host}:{port}"),
        tls,
    })
}

/// What `cache serve` listens on and what protects it.
pub struct Plan {
    /// The main listener (the server's `listen`).
    pub listen: String,
    /// Its security: TLS, more listeners, users.
    pub security: Security,
    /// The protocol, when the security options fix it (`-Y`: ascii, `-S`: binary).
    pub protocol: Option<Protocol>,
    /// Lines for the log at start.
    pub notes: Vec<String>,
}

/// Builds the listeners and the security from memcached's options. `listen` is inpath's
/// `--listen HOST:PORT`; `listen_addr` and `port` are `-l` and `-p` (without `-l`, loopback:
/// memcached listens on every interface, which the listener policy would refuse).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    args: &SecurityArgs,
    extended: &[String],
    listen: Option<&str>,
    listen_addr: Option<&str>,
    port: Option<u16>,
    protocol: Option<&str>,
    udp_port: Option<u16>,
) -> Result<Plan> {
    let mut notes = Vec::new();
    let ssl = ssl_options(extended)?;
    let port = port.unwrap_or(11211);
    let mut listeners: Vec<Listener> = match (listen, listen_addr) {
        (Some(l), None) => vec![Listener {
            addr: l.to_string(),
            tls: args.enable_ssl,
        }],
        (Some(_), Some(_)) => bail!("give --listen HOST:PORT, or -l/-p, not both"),
        (None, Some(list)) => list
            .split([',', ';'])
            .filter(|e| !e.trim().is_empty())
            .map(|e| listener(e.trim(), port, args.enable_ssl))
            .collect::<Result<_>>()?,
        (None, None) => vec![Listener {
            addr: format!("127.0.0.1:{port}"),
            tls: args.enable_ssl,
        }],
    };
    if listeners.is_empty() {
        bail!("-l names no address");
    }
    let fixed = match (args.auth_file.is_some(), args.enable_sasl, protocol) {
        (true, true, _) => bail!(
            "-Y and -S together: memcached then serves the ASCII protocol only, where SASL \
             cannot run; choose one"
        ),
        (true, false, None | Some("ascii")) => Some(Protocol::Ascii),
        (true, false, Some(_)) => bail!(
            "ERROR: You cannot allow the BINARY protocol while using ascii authentication \
             tokens (-Y needs -B ascii, its default)"
        ),
        (false, true, None | Some("binary")) => Some(Protocol::Binary),
        (false, true, Some(_)) => bail!(
            "ERROR: You cannot allow the ASCII protocol while using SASL (-S needs -B binary, \
             its default)"
        ),
        (false, false, _) => None,
    };
    if args.auth_file.is_some() && udp_port.is_some_and(|p| p != 0) {
        bail!("Cannot use UDP with ascii authentication enabled (-U 0 to disable)");
    }
    let tls = if args.enable_ssl {
        Some(server_tls(&ssl, &mut notes)?)
    } else {
        None
    };
    let ascii = match &args.auth_file {
        Some(path) => {
            if let Some(w) = inpath_net::files::warn_readable(path, "auth file") {
                notes.push(w);
            }
            Some(Arc::new(Users::load(path).map_err(anyhow::Error::msg)?))
        }
        None => None,
    };
    let sasl = if args.enable_sasl {
        let path = args
            .sasl_pwdb
            .clone()
            .or_else(|| std::env::var_os("MEMCACHED_SASL_PWDB").map(PathBuf::from))
            .context(
                "-S reads its users from a user:password file (memcached's --enable-sasl-pwdb \
                 format): give --sasl-pwdb FILE or set MEMCACHED_SASL_PWDB=FILE. Cyrus SASL's \
                 sasldb (SASL_CONF_PATH) is not read",
            )?;
        if let Some(w) = inpath_net::files::warn_readable(&path, "SASL password file") {
            notes.push(w);
        }
        Some(Arc::new(Users::load(&path).map_err(anyhow::Error::msg)?))
    } else {
        None
    };
    let mut security = Security {
        tls,
        main_tls: listeners[0].tls,
        also_listen: listeners.split_off(1),
        ascii,
        sasl,
        limiter: Arc::new(Limiter::new(inpath_net::Slowing {
            free_per_second: args.auth_failures_per_second,
            delay: std::time::Duration::from_millis(args.auth_delay_ms),
        })),
        settings: Vec::new(),
    };
    security.settings = settings(args, &ssl, &security);
    let main = listeners.remove(0);
    // The listener policy, per listener: TLS where it has it, authentication as configured.
    for l in std::iter::once(&main).chain(&security.also_listen) {
        let protection = Protection {
            tls: l.tls,
            auth: security.requires_auth(),
        };
        crate::security::check_listener("cache serve", &l.addr, protection, args.insecure)?;
    }
    Ok(Plan {
        listen: main.addr,
        security,
        protocol: fixed,
        notes,
    })
}

fn server_tls(ssl: &SslOptions, notes: &mut Vec<String>) -> Result<Arc<ServerTls>> {
    let chain = ssl
        .chain_cert
        .clone()
        .context("-Z needs the server's certificate: -o ssl_chain_cert=FILE,ssl_key=FILE (PEM)")?;
    if ssl.keyformat != 1 {
        bail!(
            "-o ssl_keyformat={}: only PEM (1) keys are read (DER and ENGINE are not)",
            ssl.keyformat
        );
    }
    if ssl.kernel_tls {
        bail!("-o ssl_kernel_tls: Kernel TLS offload is not available (rustls runs in user space)");
    }
    if let Some(c) = &ssl.ciphers {
        notes.push(format!(
            "warning: -o ssl_ciphers={c} taken without effect: rustls offers only AEAD suites \
             (AES-GCM, ChaCha20-Poly1305) with forward secrecy"
        ));
    }
    // memcached: 1 is SSL_VERIFY_PEER (asked for, checked when given); 2 and 3 add
    // SSL_VERIFY_FAIL_IF_NO_PEER_CERT (required), 3 also CLIENT_ONCE (no renegotiation here).
    let client_certs = match ssl.verify_mode {
        0 => ClientCerts::Ignore,
        1 => ClientCerts::Request,
        _ => ClientCerts::Require,
    };
    let min_version = match ssl.min_version {
        3 => MinVersion::Tls13,
        2 => MinVersion::Tls12,
        old => {
            notes.push(format!(
                "note: -o ssl_min_version={old}: TLS 1.0 and 1.1 are never offered; the lowest \
                 version is TLS 1.2"
            ));
            MinVersion::Tls12
        }
    };
    let files = ServerTlsFiles {
        cert_chain: chain,
        key: ssl.key.clone(),
        // memcached loads the CA file even with ssl_verify_mode=0 (then it is not used).
        client_ca: (client_certs != ClientCerts::Ignore)
            .then(|| ssl.ca_cert.clone())
            .flatten(),
        client_certs,
        min_version,
        session_cache: ssl.session_cache,
    };
    if client_certs != ClientCerts::Ignore && ssl.ca_cert.is_none() {
        bail!(
            "-o ssl_verify_mode={} checks client certificates: give the CA file that signs them \
             (-o ssl_ca_cert=FILE)",
            ssl.verify_mode
        );
    }
    if let Some(ca) = &ssl.ca_cert {
        inpath_net::tls::load_roots(ca, "ssl_ca_cert file")?;
    }
    Ok(Arc::new(ServerTls::load(files)?))
}

/// memcached's `stats settings` lines for these options, in its order.
fn settings(args: &SecurityArgs, ssl: &SslOptions, security: &Security) -> Vec<(String, String)> {
    let path = |p: &Option<PathBuf>| {
        p.as_ref()
            .map_or("NULL".to_string(), |p| p.display().to_string())
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let verify = [0, 1, 3, 7][usize::from(ssl.verify_mode.min(3))];
    let mut v = vec![
        (
            "auth_enabled_sasl".to_string(),
            yes_no(security.sasl.is_some()),
        ),
        (
            "auth_enabled_ascii".to_string(),
            args.auth_file
                .as_ref()
                .map_or("no".to_string(), |p| p.display().to_string()),
        ),
        ("ssl_enabled".to_string(), yes_no(args.enable_ssl)),
    ];
    // memcached built with TLS (Debian's) lists these whether -Z is given or not.
    {
        v.extend([
            ("ssl_chain_cert".to_string(), path(&ssl.chain_cert)),
            ("ssl_key".to_string(), path(&ssl.key)),
            ("ssl_verify_mode".to_string(), verify.to_string()),
            ("ssl_keyformat".to_string(), ssl.keyformat.to_string()),
            (
                "ssl_ciphers".to_string(),
                ssl.ciphers.clone().unwrap_or_else(|| "NULL".into()),
            ),
            ("ssl_ca_cert".to_string(), path(&ssl.ca_cert)),
            (
                "ssl_wbuf_size".to_string(),
                (ssl.wbuf_kib * 1024).to_string(),
            ),
            ("ssl_session_cache".to_string(), yes_no(ssl.session_cache)),
            ("ssl_kernel_tls".to_string(), yes_no(ssl.kernel_tls)),
            (
                "ssl_min_version".to_string(),
                ["tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3"][usize::from(ssl.min_version.min(3))]
                    .to_string(),
            ),
        ]);
    }
    v
}
