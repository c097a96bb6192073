//! Who may use a cache server, with memcached's meanings (docs/cache.md, "TLS and
//! authentication"): TLS on some or all listeners (`-Z`, the `ssl_*` options, the `notls:`
//! prefix of `-l`), ASCII authentication (`-Y FILE`: a `set` whose value is `user password`
//! as the first command) and SASL PLAIN for the binary protocol (`-S`), both from files of
//! `user:password` lines. The TLS itself is `inpath_net`'s (rustls).
//!
//! A leaf: the configuration, the users, and the counters `stats` shows; the per-connection
//! logic is `gate`.

use inpath_net::{Limiter, ServerTls};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// Users and passwords from a memcached auth file (`user:password` a line; the password runs
/// to the end of the line). memcached's `-Y` file and `MEMCACHED_SASL_PWDB` file alike.
#[derive(Clone)]
pub struct Users {
    path: PathBuf,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users")
            .field("path", &self.path)
            .field("users", &self.entries.len())
            .finish()
    }
}

impl Users {
    /// Reads a `user:password` file, as memcached reads its `-Y` file: a line without a `:`
    /// is malformed (memcached refuses to start, and so does this). Unlike memcached, which
    /// keeps the first 8 entries and drops the rest silently, every entry is kept.
    pub fn load(path: &Path) -> Result<Users, String> {
        let bytes = inpath_net::files::read(path, "auth file").map_err(|e| {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            text
        })?;
        let mut entries = Vec::new();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(format!(
                    "auth file {} has a malformed entry on line {}: expected user:password",
                    path.display(),
                    i + 1
                ));
            };
            entries.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        Ok(Users {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// Whether `user` and `password` are an entry. Every entry is compared whole, whichever
    /// matches (no early exit on the first differing byte).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let eq = |a: &[u8], b: &[u8]| {
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        };
        self.entries.iter().fold(false, |found, (u, p)| {
            found | (eq(u, user) & eq(p, password))
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of users.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no user.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One more address to listen on, from memcached's `-l` list, with or without TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// `HOST:PORT`.
    pub addr: String,
    /// Whether connections on it speak TLS (`false` for a `notls:` entry under `-Z`).
    pub tls: bool,
}

/// What protects a cache server. The default protects nothing (memcached's default).
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS (`-Z` with `ssl_chain_cert`, `ssl_key`, `ssl_ca_cert`, `ssl_verify_mode`,
    /// `ssl_min_version`).
    pub tls: Option<Arc<ServerTls>>,
    /// Whether the main listener (`ServerConfig::listen`) speaks TLS: `false` for a
    /// `notls:` address.
    pub main_tls: bool,
    /// Listeners beyond the main one (memcached's `-l a,b,...`).
    pub also_listen: Vec<Listener>,
    /// ASCII authentication (`-Y`).
    pub ascii: Option<Arc<Users>>,
    /// SASL PLAIN in the binary protocol (`-S`).
    pub sasl: Option<Arc<Users>>,
    /// Counts and slows failed authentications per address.
    pub limiter: Arc<Limiter>,
    /// memcached's `stats settings` lines for these options (`ssl_enabled`, ...,
    /// `auth_enabled_sasl`, `auth_enabled_ascii`), in its order.
    pub settings: Vec<(String, String)>,
}

impl Security {
    /// Whether clients must authenticate.
    pub fn requires_auth(&self) -> bool {
        self.ascii.is_some()
            || self.sasl.is_some()
            || self.tls.as_ref().is_some_and(|t| t.requires_client_cert())
    }
}

/// Authentication and TLS counters for `stats` (memcached's `auth_cmds`, `auth_errors`,
/// `ssl_handshake_errors`; inpath's `auth_slowed`).
#[derive(Debug, Default)]
pub struct AccessCounters {
    /// Authentication attempts (ASCII and SASL).
    pub auth_cmds: AtomicU64,
    /// Failed attempts.
    pub auth_errors: AtomicU64,
    /// Attempts made to wait because their address failed often just now.
    pub auth_slowed: AtomicU64,
    /// TLS handshakes that failed (plain clients on a TLS listener among them).
    pub ssl_handshake_errors: AtomicU64,
    tls: OnceLock<Arc<ServerTls>>,
    settings: OnceLock<Vec<(String, String)>>,
}

impl AccessCounters {
    /// Records what the server runs with (once, at start).
    pub fn configure(&self, security: &Security) {
        if let Some(tls) = &security.tls {
            let _ = self.tls.set(tls.clone());
        }
        let _ = self.settings.set(security.settings.clone());
    }

    /// The server's TLS, if it has any (for `refresh_certs`).
    pub fn tls(&self) -> Option<&Arc<ServerTls>> {
        self.tls.get()
    }

    /// The lines of `stats`, in memcached's names.
    pub fn stats(&self) -> Vec<(&'static str, String)> {
        let ld = |a: &AtomicU64| a.load(Relaxed).to_string();
        let mut v = vec![
            ("auth_cmds", ld(&self.auth_cmds)),
            ("auth_errors", ld(&self.auth_errors)),
            ("auth_slowed", ld(&self.auth_slowed)),
        ];
        if let Some(tls) = self.tls.get() {
            v.push(("ssl_handshake_errors", ld(&self.ssl_handshake_errors)));
            v.push((
                "time_since_server_cert_refresh",
                tls.since_load().as_secs().to_string(),
            ));
        }
        v
    }

    /// The lines of `stats settings`.
    pub fn settings(&self) -> Vec<(String, String)> {
        self.settings.get().cloned().unwrap_or_else(|| {
            vec![
                ("ssl_enabled".into(), "no".into()),
                ("auth_enabled_sasl".into(), "no".into()),
                ("auth_enabled_ascii".into(), "no".into()),
            ]
        })
    }
}
